"""`attnx report DIR [DIR ...]`: one comparison table, and plots, from every results.json under DIRs.

A row is one configuration: the values that differ between the runs (task, encoder, attention,
score and every other swept key, read from each run's overrides). Runs that differ only by `seed`
share a row with their metrics as mean ± std. Runs that did not complete are listed apart, with their
status (failed, interrupted, running, or stale: recorded as running but no live process holds it) and
error. Writes report.md, report.csv and one `<metric>_vs_<key>.png` per swept numeric key (a line per
configuration of the other columns: exact match vs length per mechanism for a length sweep; `--panel`
splits it into panels by other keys), and prints the table. `--select optim.lr` reports each
configuration at its best learning rate on validation, as papers tune per cell. Light on purpose:
reads JSON, draws with matplotlib, never imports torch.
"""

from __future__ import annotations

import csv
import functools
import json
import re
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnx.cli import ArgumentParser
from attnx.table import markdown_table
from attnx.track.results import find_results, read_results, status

# resolved choices: a default score has a name here
CHOICES = ("task", "encoder", "decoder", "attention", "score")
NOT_SWEPT = ("seed", "resume", "ckpt_path")  # seed is averaged over; the others do not change a result
DEFAULT_METRICS = {
    "seq2seq": ("test/exact_match", "test/token_acc"),
    "classification": ("test/acc", "test/f1"),
    "lm": ("test/acc", "test/exact_match"),
}
LOWER_IS_BETTER = ("loss", "perplexity")
COSTS = (("params", "params"), ("train_seconds", "train s"), ("samples_per_second", "samples/s"))


@dataclass
class Row:
    """One configuration: its column values and the completed runs (one per seed) behind it."""

    values: tuple[Any, ...]
    runs: list[dict[str, Any]]

    def mean(self, key: str, metric: bool = True) -> float | None:
        found = [v for v in (_number(r, key, metric) for r in self.runs) if v is not None]
        return statistics.fmean(found) if found else None

    def std(self, key: str) -> float | None:
        found = [v for v in (_number(r, key, True) for r in self.runs) if v is not None]
        return statistics.stdev(found) if len(found) > 1 else None


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="attnx report", description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="sweep or run folders, searched recursively")
    parser.add_argument(
        "--metric",
        action="append",
        help="metric column(s), repeatable or comma-separated; the first is plotted "
        "(default: test/exact_match,test/token_acc for seq2seq; test/acc,test/f1 for classification)",
    )
    parser.add_argument("--x", action="append", help="swept numeric key(s) to plot against (default: all)")
    parser.add_argument(
        "--panel",
        action="append",
        help="config key(s) whose values each get a panel of the plots, repeatable or comma-separated "
        "(e.g. task.seq_len,task.num_kv_pairs)",
    )
    parser.add_argument(
        "--select",
        help="a swept key to tune per row, e.g. optim.lr: of the rows that differ only in it, keep the one "
        "with the best mean --by metric (the value chosen stays in its column)",
    )
    parser.add_argument("--by", help="the metric --select ranks by (default: the first metric, on val/)")
    parser.add_argument("--out", type=Path, help="where report.md/.csv/.png go (default: the first DIR)")
    args = parser.parse_args(argv)

    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        print(f"attnx report: no such folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    runs = load(args.dirs)
    if not runs:  # a folder without runs is a mistyped path, as much as a missing one
        print(
            f"attnx report: no readable results.json under {', '.join(map(str, args.dirs))}", file=sys.stderr
        )
        return 2
    for run in runs:  # `running` whose process is gone (kill -9, a lost node) is `stale`
        run["status"] = status(run, run["_path"])
        if run["status"] == "stale":
            run["error"] = f"pid {run.get('pid')} on {run.get('host')} ended without a record (killed?)"
    columns = swept_columns(runs)
    done = [r for r in runs if r.get("status") == "completed"]
    metrics = [m for item in args.metric for m in item.split(",")] if args.metric else default_metrics(done)
    measured = sorted({m for r in done for m in r.get("metrics", {})})
    absent = [m for m in metrics if m not in measured]
    if args.metric and done and absent:
        print(
            f"attnx report: --metric {absent[0]}: no run has it; metrics: {', '.join(measured)}",
            file=sys.stderr,
        )
        return 2
    numeric = [c for c in columns if _is_numeric([value(r, c) for r in runs])]
    xs = args.x or numeric
    unknown = [x for x in xs if x not in numeric]
    if unknown:
        swept = ", ".join(numeric) or "(none)"
        print(f"attnx report: --x {unknown[0]} is not a swept numeric key; swept: {swept}", file=sys.stderr)
        return 2

    if args.select is not None and args.select not in columns:
        swept = ", ".join(columns) or "(none)"
        print(f"attnx report: --select {args.select} is not a swept key; swept: {swept}", file=sys.stderr)
        return 2
    rows = group(done, columns)
    if args.select is not None:
        rows = select(rows, columns, args.select, args.by or metrics[0].replace("test/", "val/", 1))
    panels = [p for item in args.panel or [] for p in item.split(",")]
    unfinished = [r for r in runs if r.get("status") != "completed"]
    out = args.out or args.dirs[0]
    out.mkdir(parents=True, exist_ok=True)
    plots = [
        path for path in (plot(rows, columns, metrics[0], x, out, panels, args.select) for x in xs) if path
    ]
    table, failed = results_table(columns, metrics, rows), failed_table(columns, unfinished)
    write_csv(out / "report.csv", columns, metrics, rows, unfinished)
    (out / "report.md").write_text(markdown_report(runs, columns, metrics, rows, table, failed, plots))
    print(table)
    if failed:
        print(f"\nruns that did not complete:\n{failed}")
    written = ", ".join(map(str, [out / "report.md", out / "report.csv", *plots]))
    print(f"\n{outcome(runs)}; wrote {written}")
    return 0


def load(dirs: list[Path]) -> list[dict[str, Any]]:
    """Every run record under `dirs`; each file that is not a JSON object is named in one stderr line
    and skipped, so one damaged run never hides the others."""
    runs = []
    for folder in dirs:
        for path in find_results(folder):
            try:
                record = read_results(path)
            except ValueError as error:  # read_results names the file and what is wrong with it
                print(f"attnx report: skipping {error}", file=sys.stderr)
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
    """A column's value: the resolved choice (task/encoder/attention/score), else the resolved config
    entry, else the override as written (a config group such as `logger=many`, or `experiment=x`)."""
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
    return [k for k in candidates if len({_key(value(r, k)) for r in runs}) > 1]


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
        rows.setdefault(tuple(map(_key, values)), Row(values, [])).runs.append(run)
    return [rows[k] for k in sorted(rows)]


def select(rows: list[Row], columns: list[str], key: str, by: str) -> list[Row]:
    """Per configuration of the columns other than `key`, the row whose mean `by` is best (the paper's
    protocol of reporting each cell at its best validation learning rate); rows without `by` lose."""
    i = columns.index(key)
    lower = any(word in by for word in LOWER_IS_BETTER)
    best: dict[tuple[Any, ...], Row] = {}
    for row in rows:
        cell = tuple(map(_key, row.values[:i] + row.values[i + 1 :]))
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


def results_table(columns: list[str], metrics: list[str], rows: list[Row]) -> str:
    seeds = any(len(row.runs) > 1 for row in rows)
    header = [*columns, *(["n"] if seeds else []), *metrics, *(label for _, label in COSTS)]
    body = []
    for row in rows:
        cells = [_text(v) for v in row.values] + ([str(len(row.runs))] if seeds else [])
        cells += [_mean_std(row.mean(m), row.std(m)) for m in metrics]
        cells += [_cost(row.mean(key, metric=False), key) for key, _ in COSTS]
        body.append(cells)
    return markdown_table(header, body, right_from=len(columns))


def failed_table(columns: list[str], runs: list[dict[str, Any]]) -> str:
    if not runs:
        return ""
    body = [
        [
            *(_text(value(r, c)) for c in columns),
            str(r.get("status")),
            _first_line(r.get("error")),
            r["_path"],
        ]
        for r in runs
    ]
    return markdown_table([*columns, "status", "error", "folder"], body)


def outcome(runs: list[dict[str, Any]]) -> str:
    """`4/7 runs completed; 1 failed, 1 interrupted, 1 stale`."""
    done = sum(r["status"] == "completed" for r in runs)
    others = Counter(r["status"] for r in runs if r["status"] != "completed")
    rest = ", ".join(f"{n} {state}" for state, n in sorted(others.items()))
    return f"{done}/{len(runs)} runs completed" + (f"; {rest}" if rest else "")


def markdown_report(
    runs: list[dict[str, Any]],
    columns: list[str],
    metrics: list[str],
    rows: list[Row],
    table: str,
    failed: str,
    plots: list[Path],
) -> str:
    common = {k: v for k, v in overrides(runs[0]).items() if k not in columns and k not in NOT_SWEPT}
    common = {k: v for k, v in common.items() if all(overrides(r).get(k) == v for r in runs)}
    lines = ["# attnx report", "", f"{outcome(runs)}."]
    if common:
        lines.append(
            "Common to every run: " + ", ".join(f"`{k}={_text(v)}`" for k, v in common.items()) + "."
        )
    lines += ["", table, ""]
    for metric in metrics:
        scored = [(row.mean(metric), row) for row in rows if row.mean(metric) is not None]
        if scored:
            pick = min if any(word in metric for word in LOWER_IS_BETTER) else max
            best, row = pick(scored, key=lambda item: item[0])
            where = (
                ", ".join(f"{c}={_text(v)}" for c, v in zip(columns, row.values)) or "the only configuration"
            )
            lines.append(f"- best {metric}: {best:.4f} ({where})")
    if failed:
        lines += ["", "## Runs that did not complete", "", failed]
    lines += [""] + [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(lines) + "\n"


def write_csv(
    path: Path, columns: list[str], metrics: list[str], rows: list[Row], failed: list[dict[str, Any]]
) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        costs = [key for key, _ in COSTS]
        writer.writerow(
            [*columns, "status", "n", *metrics, *(f"{m} std" for m in metrics), *costs, "error", "folders"]
        )
        for row in rows:
            writer.writerow(
                [*row.values, "completed", len(row.runs)]
                + [row.mean(m) for m in metrics]
                + [row.std(m) for m in metrics]
                + [row.mean(key, metric=False) for key in costs]
                + ["", " ".join(r["_path"] for r in row.runs)]
            )
        for run in failed:
            writer.writerow(
                [*(value(run, c) for c in columns), run.get("status"), 1]
                + [""] * (2 * len(metrics) + len(costs))
                + [_first_line(run.get("error")), run["_path"]]
            )


def plot(
    rows: list[Row],
    columns: list[str],
    metric: str,
    x: str,
    out: Path,
    panels: list[str] | None = None,
    tuned: str | None = None,
) -> Path | None:
    """`metric` against `x`, one line per configuration of the other columns, ± std as error bars; with
    `panels` (config keys), one panel per combination of their values. Lines are named by the columns
    that tell them apart within a panel, never by `tuned` (the key `--select` chose per row)."""
    from matplotlib.figure import Figure

    xi = columns.index(x)
    others = [c for c in columns if c not in (x, tuned, *(panels or []))]
    points = []
    for row in rows:  # sorted, so lines come in table order and points by x
        mean = row.mean(metric)
        if mean is not None and row.values[xi] is not None:
            panel = tuple(value(row.runs[0], p) for p in panels or [])
            points.append(
                (panel, dict(zip(columns, row.values)), (row.values[xi], mean, row.std(metric) or 0.0))
            )
    if not points:
        return None
    # a column constant inside every panel (the cell's name when panels are its fields) tells no lines apart
    varying = [
        c
        for c in others
        if len({(pn, _key(named[c])) for pn, named, _ in points}) > len({pn for pn, _, _ in points})
    ]
    grid: dict[tuple[Any, ...], dict[str, list[tuple[Any, float, float]]]] = {}
    for panel, named, point in points:
        label = ", ".join(f"{c}={_text(named[c])}" for c in varying) or metric
        grid.setdefault(panel, {}).setdefault(label, []).append(point)
    labels = list(dict.fromkeys(label for lines in grid.values() for label in lines))
    legend_inches = 0.06 * max(map(len, labels)) + 0.6 if len(labels) > 1 else 0.0
    figure = Figure(figsize=(4.5 * len(grid) + 1.0 + legend_inches, 4.0), layout="constrained")
    axes = figure.subplots(1, len(grid), sharey=True, squeeze=False)[0]
    colours = {label: f"C{i % 10}" for i, label in enumerate(labels)}
    for ax, panel in zip(axes, sorted(grid, key=lambda values: tuple(map(_key, values)))):
        for label, series in grid[panel].items():
            ax.errorbar(
                *zip(*sorted(series, key=lambda p: p[0])),
                marker="o",
                capsize=3,
                color=colours[label],
                label=label if ax is axes[0] else None,
            )
        ax.set_xlabel(x)
        ax.set_title(", ".join(f"{p}={_text(v)}" for p, v in zip(panels or [], panel)), fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(metric)
    if len(labels) > 1:
        figure.legend(loc="outside right upper", fontsize=7)
    path = out / f"{_slug(metric)}_vs_{_slug(x)}.png"
    figure.savefig(path, dpi=120)
    return path


def _number(run: dict[str, Any], key: str, metric: bool) -> float | None:
    found = run.get("metrics", {}).get(key) if metric else run.get(key)
    return None if found is None else float(found)


def _is_numeric(values: list[Any]) -> bool:
    present = [v for v in values if v is not None]
    return bool(present) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present)


def _key(v: Any) -> tuple[int, Any]:
    """Sort numbers numerically before text; make unhashable values (lists) comparable and hashable."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return (0, v)
    return (1, json.dumps(v, sort_keys=True))


def _text(v: Any) -> str:
    return "–" if v is None else json.dumps(v) if isinstance(v, bool | list | dict) else str(v)


def _mean_std(mean: float | None, std: float | None) -> str:
    if mean is None:
        return "–"
    return f"{mean:.3f} ± {std:.3f}" if std is not None else f"{mean:.3f}"


def _cost(v: float | None, key: str) -> str:
    if v is None:
        return "–"
    return f"{v:,.0f}" if key != "train_seconds" else f"{v:.1f}"


def _first_line(error: str | None) -> str:
    line = next(iter((error or "").strip().splitlines()), "")
    return line if len(line) <= 120 else line[:117] + "..."


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")
