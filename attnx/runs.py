"""Run records grouped into configurations: what `attnx report` and `attnx compare` tabulate.

A configuration is the tuple of values that differ between runs (task, encoder, attention, score and
every other swept key, read from each run's overrides). Runs that differ only by `seed` are its
repeats, one per seed. Light on purpose: reads JSON, never imports torch.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnx.track.results import find_results, read_results

# resolved choices: a default score has a name here
CHOICES = ("task", "encoder", "decoder", "attention", "score")
NOT_SWEPT = ("seed", "resume", "ckpt_path")  # seed is averaged over; the others do not change a result
DEFAULT_METRICS = {
    "seq2seq": ("test/exact_match", "test/token_acc"),
    "classification": ("test/acc", "test/f1"),
    "lm": ("test/acc", "test/exact_match"),
}
LOWER_IS_BETTER = ("loss", "perplexity", "per", "wer")


@dataclass
class Row:
    """One configuration: its column values and the completed runs (one per seed) behind it."""

    values: tuple[Any, ...]
    runs: list[dict[str, Any]]

    def found(self, key: str, metric: bool = True) -> list[float]:
        """`key`'s value in each run that has it: a metric, or (`metric=False`) a record field."""
        return [v for v in (_number(r, key, metric) for r in self.runs) if v is not None]

    def mean(self, key: str, metric: bool = True) -> float | None:
        found = self.found(key, metric)
        return statistics.fmean(found) if found else None

    def std(self, key: str) -> float | None:
        found = self.found(key)
        return statistics.stdev(found) if len(found) > 1 else None

    def by_seed(self, metric: str) -> dict[Any, float]:
        """The metric per seed (the first run of a seed that has it), for pairing with another row."""
        seeds: dict[Any, float] = {}
        for run in self.runs:
            found = _number(run, metric, True)
            if found is not None:
                seeds.setdefault(value(run, "seed"), found)
        return seeds


def load(dirs: list[Path], prog: str = "attnx report") -> list[dict[str, Any]]:
    """Every run record under `dirs`, with its folder as `_path`; each file that is not a JSON object
    is named in one stderr line and skipped, so one damaged run never hides the others."""
    runs = []
    for folder in dirs:
        for path in find_results(folder):
            try:
                record = read_results(path)
            except ValueError as error:  # read_results names the file and what is wrong with it
                print(f"{prog}: skipping {error}", file=sys.stderr)
                continue
            runs.append(record | {"_path": str(path.parent)})
    return runs


def overrides(run: dict[str, Any]) -> dict[str, Any]:
    """A run's overrides as key -> value, parsed and typed by Hydra's grammar (`+seeed=3` is key
    `seeed` with the int 3)."""
    return _parsed(tuple(run.get("overrides", [])))


@functools.cache  # a report looks each run's overrides up once per column
def _parsed(items: tuple[str, ...]) -> dict[str, Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(items))
    return {o.key_or_group: o.value() for o in parsed if not o.is_delete()}


def value(run: dict[str, Any], key: str) -> Any:
    """A column's value: a label the caller attached to the record in memory (`labels`: attnx compare's
    suite task and mechanism), else the resolved choice (task/encoder/attention/score), else the resolved
    config entry, else the override as written (a config group such as `logger=many`, or `experiment=x`)."""
    if key in run.get("labels", {}):
        return run["labels"][key]
    if key in CHOICES:
        return run.get("choices", {}).get(key)
    node: Any = run.get("config", {})
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return overrides(run).get(key) if node is None or isinstance(node, dict) else node


def swept_columns(runs: list[dict[str, Any]]) -> list[str]:
    """Choices, then overridden keys, that take more than one value across the runs."""
    keys = [k for run in runs for k in overrides(run) if k not in CHOICES and k not in NOT_SWEPT]
    candidates = [*CHOICES, *sorted(dict.fromkeys(keys))]
    return [k for k in candidates if len({sort_key(value(r, k)) for r in runs}) > 1]


def default_metrics(runs: list[dict[str, Any]]) -> list[str]:
    """The main metrics of the task kinds present; val/ ones when the runs skipped the test split."""
    chosen: list[str] = []
    for kind in dict.fromkeys(r.get("model_type", r.get("task_kind")) for r in runs):
        for metric in DEFAULT_METRICS.get(kind, ()):
            if not any(metric in r["metrics"] for r in runs):
                metric = metric.replace("test/", "val/", 1)
            chosen.append(metric)
    return chosen or ["val/loss"]


def group(runs: list[dict[str, Any]], columns: list[str]) -> list[Row]:
    rows: dict[tuple[Any, ...], Row] = {}
    for run in runs:
        values = tuple(value(run, c) for c in columns)
        rows.setdefault(tuple(map(sort_key, values)), Row(values, [])).runs.append(run)
    return [rows[k] for k in sorted(rows)]


def select(rows: list[Row], columns: list[str], key: str, by: str) -> list[Row]:
    """Per configuration of the columns other than `key`, the row whose mean `by` is best (the paper's
    protocol of reporting each cell at its best validation learning rate); rows without `by` lose."""
    i = columns.index(key)
    lower = lower_is_better(by)
    best: dict[tuple[Any, ...], Row] = {}
    for row in rows:
        cell = tuple(map(sort_key, row.values[:i] + row.values[i + 1 :]))
        score = row.mean(by)
        if score is None:
            best.setdefault(cell, row)
            continue
        held = best.get(cell)
        held_score = None if held is None else held.mean(by)
        if held_score is None or (score < held_score if lower else score > held_score):
            best[cell] = row
    kept = {id(row) for row in best.values()}
    return [row for row in rows if id(row) in kept]


def _number(run: dict[str, Any], key: str, metric: bool) -> float | None:
    found = run.get("metrics", {}).get(key) if metric else run.get(key)
    return None if found is None else float(found)


def is_numeric(values: list[Any]) -> bool:
    present = [v for v in values if v is not None]
    return bool(present) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present)


def sort_key(v: Any) -> tuple[int, Any]:
    """Sort numbers numerically before text; make unhashable values (lists) comparable and hashable."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return (0, v)
    return (1, json.dumps(v, sort_keys=True))


def text(v: Any) -> str:
    """A value as a table shows it: None as an en dash, lists and booleans as JSON."""
    return "–" if v is None else json.dumps(v) if isinstance(v, bool | list | dict) else str(v)


def lower_is_better(metric: str) -> bool:
    """Losses, perplexity and error rates (PER, WER) fall as models improve; everything else rises."""
    name = metric.rsplit("/", 1)[-1]
    return any(word in name for word in LOWER_IS_BETTER)
