"""Run records grouped into configurations: what `attnx report` and `attnx compare` tabulate.

A configuration is the tuple of values that differ between runs (task, encoder, attention, score and
every other swept key, read from each run's overrides). Runs that differ only by `seed` are its
repeats, one per seed. Light on purpose: reads JSON, never imports torch.

Every run folder (`attnx.track.results.find_runs`) gives a record: a folder without a readable
results.json gets one too, `no record` or `unreadable`, with its configuration from `.hydra/` where it
has one; a completed record that holds what no table can show (a NaN or infinite metric, a string or a
list where a number belongs, no metrics) is `invalid`. Each says why in its `error`, so a report lists
it and never ranks it.
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnx.registry import Metric, model_types
from attnx.registry import model_type as registry_model_type
from attnx.track.results import CHOICES, RESULTS, Unreadable, find_runs, read_results

# resolved choices: a default score has a name here
NOT_SWEPT = ("seed", "resume", "ckpt_path")  # seed is averaged over; the others do not change a result
# a test slice's metric (`test@2x/exact_match`: attnx.tasks.base.slice_name's split, read back without torch)
SLICE_METRIC = re.compile(r"test@(\d+)x/(.+)")
NUMBERS = ("params", "train_seconds", "samples_per_second")  # record fields the tables average


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


def load(dirs: list[Path]) -> list[dict[str, Any]]:
    """A record (`read_run`) for every run folder under `dirs`, each folder once."""
    folders: dict[Path, Path] = {}
    for root in dirs:  # DIRs that overlap name a folder once, as the first DIR found it
        for folder in find_runs(root):
            folders.setdefault(folder.resolve(), folder)
    return [read_run(folder) for folder in folders.values()]


def read_run(folder: Path) -> dict[str, Any]:
    """`folder`'s record with the folder as `_path`: its results.json, checked (`_shape`, and `_values`
    for a completed run); when it has none, or none readable, or one no table can show, a record saying
    so (module doc)."""
    path = folder / RESULTS
    try:
        record = read_results(path) if path.exists() else None
    except Unreadable as error:
        return _lost(folder, "unreadable", f"{RESULTS}: {error.reason}")
    if record is None:
        return _lost(
            folder, "no record", f"no {RESULTS} (the run stopped before writing it, or it was removed)"
        )
    why = _shape(record)
    if why is not None:  # its configuration cannot be read either: its overrides at most
        return _lost(folder, "invalid", why, record.get("overrides"))
    why = _values(record) if record.get("status") == "completed" else None
    return record | {"_path": str(folder)} | ({"status": "invalid", "error": why} if why else {})


def _lost(folder: Path, status: str, why: str, given: Any = None) -> dict[str, Any]:
    """A record for a run folder that has none to show (`_lost`): its status, why, and its overrides:
    `given` when they parse, else those it saved in `.hydra/` as it started (`_saved_overrides`)."""
    if _shape({"overrides": given}) is not None:
        given = _saved_overrides(folder)
    return {"status": status, "error": why, "overrides": given, "_path": str(folder), "_lost": True}


def _saved_overrides(folder: Path) -> list[str]:
    """The overrides a run saved in `.hydra/overrides.yaml` as it started; none when they are unreadable."""
    import yaml

    try:
        saved = yaml.safe_load((folder / ".hydra" / "overrides.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return []
    return saved if _shape({"overrides": saved}) is None else []


def _shape(record: dict[str, Any]) -> str | None:
    """Overrides that are not a list of strings Hydra parses, or a choices or config that is no mapping."""
    given = record.get("overrides", [])
    if not isinstance(given, list) or not all(isinstance(o, str) for o in given):
        return f"overrides is {_shown(given)}, not a list of strings"
    try:
        overrides(record)
    except Exception as error:  # Hydra's parser raises its own exception types
        return f"overrides do not parse: {str(error).strip().splitlines()[0]}"
    return next(
        (
            f"{key} is a {_kind(record[key])}, not a mapping"
            for key in ("choices", "config")
            if not isinstance(record.get(key, {}), dict)
        ),
        None,
    )


def _values(record: dict[str, Any]) -> str | None:
    """Metrics, by-length curves and the costs the tables average that are not finite numbers, or none."""
    if "metrics" not in record:
        return "no metrics"
    for key in ("metrics", "by_length"):
        if not isinstance(record.get(key, {}), dict):
            return f"{key} is a {_kind(record[key])}, not a mapping"
    numbers = [*record["metrics"].items(), *((k, record[k]) for k in NUMBERS if record.get(k) is not None)]
    for name, curve in record.get("by_length", {}).items():
        if not isinstance(curve, dict) or not all(str(n).isdigit() for n in curve):
            return f"by_length.{name} is {_shown(curve)}, not lengths to numbers"
        numbers += [(f"by_length.{name}.{n}", v) for n, v in curve.items()]
    return next((f"{name} is {why}" for name, v in numbers if (why := _not_a_number(v))), None)


def _not_a_number(v: Any) -> str | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return f"{_shown(v)} (a {_kind(v)}, not a number)"
    return None if math.isfinite(v) else json.dumps(v)  # NaN, Infinity, -Infinity


def _kind(v: Any) -> str:
    kinds = {str: "string", list: "list", dict: "mapping", bool: "boolean", type(None): "null"}
    return kinds.get(type(v), type(v).__name__)


def _shown(v: Any) -> str:
    shown = json.dumps(v, default=str)
    return shown if len(shown) <= 40 else shown[:37] + "..."


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
    if key in CHOICES and "choices" in run:  # a record without them (a lost run's): its overrides
        return run["choices"].get(key)
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
    """The metrics each model type present declares for reports (`attnx.registry.model_types`: `report`),
    each followed by its twins on the test slices the runs have (`test/exact_match`, `test@2x/exact_match`,
    ...); val/ ones when the runs skipped the test split. A model type this process has not registered (a
    plugin's, which a report does not import) is shown by its records' headline metric."""
    chosen: list[str] = []
    for name in dict.fromkeys(r.get("model_type", r.get("task_kind")) for r in runs):
        if name is None:
            continue
        for metric in (f"test/{m}" for m in _reported(name, runs)):
            if not any(metric in r["metrics"] for r in runs):
                metric = metric.replace("test/", "val/", 1)
            chosen += [metric, *slice_twins(runs, metric)]
    return chosen or ["val/loss"]


def _reported(model_type: str, runs: list[dict[str, Any]]) -> tuple[str, ...]:
    """What `attnx report` shows of a model type's runs: its declaration's, else the metric its records'
    convergence judged (the model type's headline, unless the runs chose another)."""
    if model_type in {t.name for t in model_types()}:
        return registry_model_type(model_type).report
    judged = [
        str((r.get("convergence") or {}).get("metric", "")).removeprefix("val/")
        for r in runs
        if r.get("model_type") == model_type
    ]
    return tuple(dict.fromkeys(m for m in judged if m))


def slice_multiples(runs: list[dict[str, Any]], metric: str) -> list[int]:
    """The multiples k, ascending, of the test slices on which some run has `metric` (a `test/` name)."""
    name = metric.removeprefix("test/")
    found = (SLICE_METRIC.fullmatch(key) for r in runs for key in r.get("metrics", {}))
    return sorted({int(m[1]) for m in found if m is not None and m[2] == name})


def slice_twins(runs: list[dict[str, Any]], metric: str) -> list[str]:
    """`metric`'s twins on the runs' test slices: test/exact_match -> test@2x/exact_match, ..."""
    if not metric.startswith("test/"):
        return []
    return [metric.replace("test/", f"test@{k}x/", 1) for k in slice_multiples(runs, metric)]


def group(runs: list[dict[str, Any]], columns: list[str]) -> list[Row]:
    rows: dict[tuple[Any, ...], Row] = {}
    for run in runs:
        values = tuple(value(run, c) for c in columns)
        rows.setdefault(tuple(map(sort_key, values)), Row(values, [])).runs.append(run)
    return [rows[k] for k in sorted(rows)]


def declared(runs: list[dict[str, Any]], metric: str) -> Metric | None:
    """`metric`'s declaration (its direction and ceiling): the first record's that declares it
    (results.json's `metric_declarations`), else, for a record from before they were recorded, its
    model type's (the registry's metric of that name after the split); None when neither has one."""
    for run in runs:
        found = (run.get("metric_declarations") or {}).get(metric)
        if isinstance(found, dict):
            return Metric(
                metric.rsplit("/", 1)[-1], bool(found.get("higher_is_better", True)), found.get("ceiling")
            )
    registered = {t.name: t for t in model_types()}
    name = metric.rsplit("/", 1)[-1]
    for kind in dict.fromkeys(r.get("model_type", r.get("task_kind")) for r in runs):
        declaring = registered.get(str(kind))
        if declaring is not None and name in {m.name for m in declaring.metrics}:
            return declaring.metric(name)
    return None


def higher_is_better(runs: list[dict[str, Any]], metric: str) -> bool:
    """Whether `metric` rises as models improve, as declared (`declared`); a metric no record or model
    type declares is taken to rise, and the report says so (`undeclared`)."""
    found = declared(runs, metric)
    return True if found is None else found.higher_is_better


def undeclared(runs: list[dict[str, Any]], metrics: list[str]) -> list[str]:
    """The metrics of `metrics` nothing declares: their direction is taken as higher is better."""
    return [m for m in metrics if declared(runs, m) is None]


def select(rows: list[Row], columns: list[str], key: str, by: str, higher: bool) -> list[Row]:
    """Per configuration of the columns other than `key`, the row whose mean `by` is best (`higher` or
    lower being better: the paper's protocol of reporting each cell at its best validation learning
    rate); rows without `by` lose."""
    i = columns.index(key)
    best: dict[tuple[Any, ...], Row] = {}
    for row in rows:
        cell = tuple(map(sort_key, row.values[:i] + row.values[i + 1 :]))
        score = row.mean(by)
        if score is None:
            best.setdefault(cell, row)
            continue
        held = best.get(cell)
        held_score = None if held is None else held.mean(by)
        if held_score is None or (score > held_score if higher else score < held_score):
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
