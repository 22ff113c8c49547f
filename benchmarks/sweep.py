"""The README's experiments, measured: a named `attnx train` command, timed whole, and its `attnx report`.

Each name in SWEEPS is a command the README shows (a shipped experiment, a paper's grid, a real-data task),
run as a child process into a fresh folder (`hydra.sweep.dir`, or `hydra.run.dir` for a single run) and
timed whole (wall clock: every run, two at a time where the experiment asks for joblib); then `attnx
report` of that folder with the sweep's report options. Recorded: the wall time and runs, the report's
printed table, its rows (report.csv) for prose (`rows`, keyed by the configuration's values joined by
`/`), a pivot where the README shows one, and the report's figure copied into docs/ where the
README shows it.

    python benchmarks/sweep.py NAME [--keep DIR] [-- OVERRIDES...]   # OVERRIDES: e.g. a smaller trial
    python benchmarks/sweep.py NAME --reuse DIR   # DIR: the same command's completed sweep, reported again

`--reuse` records a sweep already run into DIR by the same `attnx train` command (its multirun.yaml says
which): the wall time is then from its first run's start to its last record's write.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import common


@dataclass(frozen=True)
class Sweep:
    train: tuple[str, ...]  # `attnx train` arguments
    report: tuple[str, ...] = ()  # `attnx report DIR` options
    figure: tuple[str, str] | None = None  # (the report's PNG, where the README shows it)
    pivot: str | None = None  # a configuration key whose values become the pivot's columns
    by: tuple[str, ...] = ()  # the keys that label the pivot's rows, sorted in this order
    metric: str | None = None  # the pivot's metric (default: the report's first)
    goal_minutes: float | None = None  # a wall-time goal: then a row of the benchmarks' summary
    columns: tuple[str, ...] = ()  # report.csv's columns of a `rows` table, one row per configuration


ZOOLOGY_REPORT = ("--x", "lm.d_model", "--panel", "task.seq_len,task.num_kv_pairs", "--select", "optim.lr",
                  "--by", "val/acc", "--metric", "test/acc,test/exact_match")  # fmt: skip
SWEEPS = {
    "bahdanau_length": Sweep(
        ("-m", "experiment=bahdanau_length"),
        figure=("test_exact_match_vs_task.max_len.png", "bahdanau_length.png"),
    ),
    "luong_scores": Sweep(("-m", "experiment=luong_scores")),
    "heads_ablation": Sweep(("-m", "experiment=heads_ablation")),
    "sentiment_pooling": Sweep(("-m", "experiment=sentiment_pooling")),
    "zoology_mqar": Sweep(
        ("-m", "experiment=zoology_mqar"),
        ZOOLOGY_REPORT,
        figure=("test_acc_vs_lm.d_model.png", "zoology_mqar.png"),
        pivot="lm.d_model",
        by=("mqar", "attention"),
        metric="test/acc",
        goal_minutes=40,
    ),
    # Figure 2's question at one width: softmax and linear attention at d 64 (its learning rate 3e-3, which
    # learnt every cell at that width), one seed, as the sequences and pairs grow
    "zoology_mqar_d64": Sweep(
        (
            "-m",
            "experiment=zoology_mqar",
            "attention=multi_head,linear",
            "lm.d_model=64",
            "optim.lr=0.003",
            "seed=0",
        ),
        ("--metric", "test/acc,test/exact_match"),
        pivot="attention",
        by=("mqar",),
        metric="test/acc",
        columns=("mqar", "attention", "test/acc", "converged"),
    ),
    "zoology_state": Sweep(
        ("-m", "experiment=zoology_state"),
        ("--pareto", "state", "--metric", "test/acc"),
        figure=("test_acc_vs_state.png", "zoology_state.png"),
        columns=("attention", "lm.d_model", "attention.window", "state_bytes", "test/acc", "converged"),
    ),
    "sentiment_movies": Sweep(
        ("-m", "task=sentiment_movies", "attention=none,fixed_c,additive,dot,multi_head", "seed=0,1,2")
    ),
    "mqar": Sweep(("task=mqar",)),
    "snippet_domain": Sweep(("task=snippet_domain",)),
    "g2p": Sweep(("task=g2p",), ("--metric", "test/per,test/wer")),
    "dates": Sweep(("-m", "task=dates", "attention=additive,none")),
}


def run(argv: list[str]) -> tuple[float, str]:
    """(wall seconds, stdout) of an attnx command in a child process; a failure ends the benchmark."""
    started = time.perf_counter()
    command = [sys.executable, "-m", "attnx.cli", *argv]
    done = subprocess.run(command, cwd=common.REPO, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started, done.stdout


def reused(folder: Path, train: list[str]) -> float:
    """The wall seconds of a completed sweep in `folder` run by `train`'s command: from its first run's start
    to its last record's write. Refused when a run did not complete or the sweep's overrides differ."""
    saved = (folder / "multirun.yaml").read_text() if (folder / "multirun.yaml").exists() else ""
    wanted = [w for w in train[1:] if "=" in w and not w.startswith("hydra.sweep.dir=")]
    if any(w not in saved for w in wanted):
        raise SystemExit(f"--reuse {folder}: not a sweep of {' '.join(wanted)} (its multirun.yaml)")
    paths = sorted(folder.rglob("results.json"))
    records = [json.loads(path.read_text()) for path in paths]
    if not records or any(r["status"] != "completed" for r in records):
        raise SystemExit(f"--reuse {folder}: not every run completed")
    started = min(datetime.datetime.strptime(r["started"], "%Y-%m-%d %H:%M:%S").timestamp() for r in records)
    return max(path.stat().st_mtime for path in paths) - started


def report_rows(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """report.csv's configuration columns (those before `status`) and its completed rows, numbers read."""
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    header = list(rows[0]) if rows else []
    config = header[: header.index("status")] if "status" in header else []
    numeric = [{k: _number(v) for k, v in row.items() if k != "folders"}  # where they ran: this machine's
               for row in rows if row["status"] == "completed"]  # fmt: skip
    return config, numeric


def pivot(rows: list[dict[str, Any]], column: str, keys: tuple[str, ...], metric: str) -> dict:
    """One row per value of `keys` (in natural order: `len64` before `len128`), one column per value of
    `column`: the metric's mean over seeds, * when a run of it was still improving at the end of its
    budget."""
    columns = sorted(dict.fromkeys(row[column] for row in rows), key=_natural)
    cells: dict[tuple, dict[Any, str]] = {}
    for row in sorted(rows, key=lambda row: [_natural(row[k]) for k in keys]):
        mark = "*" if "improving" in str(row.get("converged", "")) else ""
        cells.setdefault(tuple(row[k] for k in keys), {})[row[column]] = f"{row[metric]:.3f}{mark}"
    body = [[", ".join(map(_text, label)), *(of.get(c, "") for c in columns)] for label, of in cells.items()]
    return common.table([", ".join(keys), *(f"{column}={_text(c)}" for c in columns)], body, right_from=1)


def _natural(value: Any) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", _text(value))]


def _number(value: str) -> Any:
    try:
        return int(value) if value.lstrip("-").isdigit() else float(value)
    except ValueError:
        return value


def _cell(value: Any) -> str:
    """A table's cell: a count with separators, a metric to 3 places, anything else as read."""
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", choices=SWEEPS)
    p.add_argument("overrides", nargs="*", help="after --: overrides for every run (a trial, smaller)")
    p.add_argument("--keep", type=Path, help="write the runs here instead of a temporary folder")
    p.add_argument("--reuse", type=Path, help="report this folder's completed sweep of the same command")
    common.results_argument(p)
    args = p.parse_intermixed_args()
    common.begin()
    print(common.machine())
    sweep = SWEEPS[args.name]
    folder = args.reuse or args.keep or Path(tempfile.mkdtemp(prefix=f"attnx-{args.name}-"))
    where = "hydra.sweep.dir" if "-m" in sweep.train else "hydra.run.dir"
    train = ["train", *sweep.train, *args.overrides, f"{where}={folder}"]
    wall = reused(folder, train) if args.reuse else run(train)[0]
    report = ["report", str(folder), *sweep.report, "--out", str(folder / "report")]
    _, printed = run(report)
    config, rows = report_rows(folder / "report" / "report.csv")
    printed_table = common.parse_table(printed.split("\n\n")[0])  # the report's first table
    metric = sweep.metric or next(k for k in rows[0] if "/" in k and " " not in k)  # not its std, CI
    values = {
        "minutes": wall / 60,
        "seconds": wall,
        "runs": sum(1 for _ in folder.rglob("results.json")),
        "rows": {"/".join(_text(row[k]) for k in config) or "run": row for row in rows},  # one run: `run`
        "commands": [" ".join(["attnx", *train[:-1]]), " ".join(["attnx", "report", "DIR", *sweep.report])],
    }
    tables = {"report": printed_table}
    if sweep.columns:
        body = [[_cell(row.get(c, "")) for c in sweep.columns] for row in rows]
        tables["rows"] = common.table(list(sweep.columns), body, right_from=1)
    if sweep.pivot:
        tables["pivot"] = pivot(rows, sweep.pivot, sweep.by, metric)
        cells: dict[str, dict[str, float]] = {}  # `len64_pairs4/linear` -> `lm.d_model=64` -> the mean
        for row in rows:
            label = "/".join(_text(row[k]) for k in sweep.by)
            cells.setdefault(label, {})[f"{sweep.pivot}={_text(row[sweep.pivot])}"] = row[metric]
        values["pivot"] = cells
    print(f"{values['runs']} runs in {wall / 60:.1f} min; {folder}")
    headlines = []
    if sweep.goal_minutes:
        headlines.append(
            {
                "what": f"`attnx {' '.join(sweep.train)}`, {values['runs']} runs, wall",
                "goal": f"≤ {sweep.goal_minutes:g} min",
                "measured": f"{wall / 60:.1f} min",
                "verdict": common.verdict(wall <= sweep.goal_minutes * 60),
            }
        )
    common.record(args, tables, values, headlines, name=f"sweep.{args.name}")
    if sweep.figure:
        source, shown = folder / "report" / sweep.figure[0], common.REPO / "docs" / sweep.figure[1]
        if not source.exists():
            drawn = ", ".join(p.name for p in source.parent.glob("*.png"))
            raise SystemExit(f"the report drew no {source.name}, only {drawn}")
        if not args.overrides:  # a trial's figure is not the README's
            shutil.copyfile(source, shown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
