"""`attnx report DIR [DIR ...]`: one comparison, with its statistics and figures, from every results.json
under DIRs.

A row is one configuration (`attnx.report.runs`): runs that differ only by `seed` share a row, as mean ±
std with a 95% bootstrap interval over the seeds. The statistics compare the values of one key
(`attention` unless `--baseline` names another) within each cell of the other columns, pair by pair
and seed by seed, and every verdict is one procedure's (`attnx.report.verdicts`): an exact paired test,
Holm-adjusted over the family the user asked about (with `--baseline attention=additive`, each row
against its cell's additive row; without, every pair of a cell), at `--alpha`; the other pairs are
context. The paired table, the win/tie/loss matrix and verdicts.csv all show those verdicts.
`--bench bench.csv` joins `attnx bench`'s inference time at one N to the costs. Every run folder found is
listed (`attnx.track.results.find_runs`: a folder holding results.json, `.hydra/` or run.lock); one that is
not in the tables says why: no record, an unreadable one (where it breaks), an invalid one (a metric that is
not a finite number), or a run that did not complete.

Writes report.md (with PNG figures beside it), report.csv, verdicts.csv (every pair's test and verdict)
and report.html (the same, one self-contained page), and prints the table. `--select optim.lr` reports
each configuration at its best learning rate on validation, as papers tune per cell. Never imports torch.

Its exit codes (`EXIT_CODES`, in --help) tell a script a report from nothing to report from bad input.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Any

from attnx.cli import ArgumentParser
from attnx.config.compose import file_in_the_way
from attnx.report import stats
from attnx.report.document import Image, Section, Table, markdown, page
from attnx.report.runs import (
    Row,
    default_metrics,
    group,
    higher_is_better,
    is_numeric,
    load,
    select,
    swept_columns,
    text,
    value,
)
from attnx.report.sections import COSTS, converged_text, first_line, left_out_table, outcome, sections
from attnx.report.study import Study
from attnx.report.verdicts import SPANS, Procedure
from attnx.table import markdown_table
from attnx.track.results import RUN_FOLDER, status

EXIT_CODES = (
    "exit codes: 0 a report; 1 nothing to report: no run folder holds a readable record (the report, "
    "still written, says why of each); 2 bad input"
)


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="attnx report", description=__doc__.splitlines()[0], epilog=EXIT_CODES)
    parser.add_argument("dirs", nargs="+", type=Path, help="sweep or run folders, searched recursively")
    parser.add_argument(
        "--metric",
        action="append",
        help="metric column(s), repeatable or comma-separated; the first is plotted and compared "
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
    parser.add_argument(
        "--baseline",
        help="KEY=VALUE, e.g. attention=additive: pair every row with its cell's baseline row over seeds "
        "(mean difference, 95%% CI, exact test, Holm-adjusted), and compare KEY's values in a win matrix",
    )
    parser.add_argument(
        "--alpha",
        type=level,
        default=stats.ALPHA,
        help="the verdicts' level: better or worse only where the Holm-adjusted p < ALPHA (default 0.05)",
    )
    parser.add_argument(
        "--family",
        default="cell",
        choices=SPANS,
        help="where Holm's family ends: cell (each cell is its own question; default) or all (every cell)",
    )
    parser.add_argument("--bench", type=Path, help="an `attnx bench` bench.csv: inference ms joins the costs")
    parser.add_argument(
        "--pareto",
        choices=("time", "state"),
        default="time",
        help="the Pareto view's third cost: time (--bench's inference ms; default) or state (each lm run's "
        "decoding state in bytes at its longest test sequence, results.json's state_bytes), which also draws "
        "METRIC_vs_state.png: a line per compared value through its widths or windows",
    )
    parser.add_argument("--bench-n", type=int, help="the N of --bench's rows to use (default: the largest)")
    parser.add_argument(
        "--out", type=Path, help="where report.md/.csv/.html/.png go (default: the first DIR)"
    )
    parser.needs("--by", "ranks --select's choice", "--select", lambda args: args.select is not None)
    parser.needs("--bench-n", "picks the N of --bench's rows", "--bench", lambda args: args.bench is not None)
    args = parser.parse_args(argv)

    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        return _refuse(f"no such folder: {', '.join(missing)}")
    out = args.out or args.dirs[0]
    blocked = file_in_the_way(out)
    if blocked is not None:
        return _refuse(f"--out {out}: {blocked} is a file, not a folder")
    runs = load(args.dirs)
    if not runs:  # a folder without runs is a mistyped path, as much as a missing one
        return _refuse(f"no run folder under {', '.join(map(str, args.dirs))} ({RUN_FOLDER})")
    mark_stale(runs)
    readable = [r for r in runs if not r.get("_lost")]  # a lost run's overrides are all it has
    columns = swept_columns(readable)
    done = [r for r in runs if r.get("status") == "completed"]
    metrics = [m for item in args.metric for m in item.split(",")] if args.metric else default_metrics(done)
    measured = sorted({m for r in done for m in r["metrics"]})
    absent = [m for m in metrics if m not in measured]
    if args.metric and done and absent:
        return _refuse(f"--metric {absent[0]}: no run has it; metrics: {', '.join(measured)}")
    numeric = [c for c in columns if is_numeric([value(r, c) for r in readable])]
    panels = [p for item in args.panel or [] for p in item.split(",")]
    by = args.by or metrics[0].replace("test/", "val/", 1)
    # a key set through a group (mqar=... sets task.seq_len) varies without being an override
    numeric += [x for x in args.x or [] if x not in numeric and varies(readable, x, numeric=True)]
    panels_known = columns + [p for p in panels if p not in columns and varies(readable, p)]
    refused = unknown_key(args, panels, by, columns, numeric, measured, panels_known)
    if refused:
        return _refuse(refused)
    try:
        key, baseline = parse_baseline(args.baseline, runs, columns)
        rows = group(done, columns)
        state = decoding_states(rows, args) if args.pareto == "state" else None
        inference = read_bench(args.bench, args.bench_n) if args.bench else None
    except ValueError as error:
        return _refuse(str(error))
    if args.select is not None:
        rows = select(rows, columns, args.select, by, higher_is_better(done, by))
    study = Study(
        runs,
        columns,
        metrics,
        rows,
        key=key or ("attention" if "attention" in columns else None),
        baseline=baseline,
        tuned=[args.select] if args.select else [],
        inference_ms=inference[1] if inference else None,
        bench_n=inference[0] if inference else None,
        procedure=Procedure(args.alpha, args.family),
        state_bytes=state,
    )
    parts = sections(study, out, args.x or numeric, panels)
    written = write(study, out, parts)
    printed = ("results", "pairs") if baseline is not None else ("results",)  # pairs: what --baseline asked
    for table in (t for s in parts for t in s.parts if isinstance(t, Table) and t.id in printed):
        print(markdown_table(table.header, table.body, right_from=table.right_from), end="\n\n")
    return _finish(study, written)


def decoding_states(rows: list[Row], args: Any) -> dict[tuple[Any, ...], int | None]:
    """--pareto state's cost of each row: its runs' recorded `state_bytes` (one model, whatever the seed);
    a ValueError when --bench is given too (the third cost is one or the other) or no run recorded one."""
    if args.bench is not None:
        raise ValueError("--pareto state puts the decoding state where --bench's inference ms goes: give one")
    found = {row.values: row.runs[0].get("state_bytes") for row in rows}
    if not any(found.values()):
        raise ValueError(
            "--pareto state: no completed run records a decoding state (state_bytes: an lm run's, from attnx "
            "train since it records one; a classifier or seq2seq model decodes no token stream)"
        )
    return found


def level(given: str) -> float:
    """--alpha's value: a number in (0, 1)."""
    try:
        alpha = float(given)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{given!r} is no number; give a level in (0, 1), e.g. 0.05"
        ) from None
    if not 0 < alpha < 1:  # `not`: nan too
        raise argparse.ArgumentTypeError(f"{given}: must be in (0, 1), e.g. 0.05")
    return alpha


def _refuse(message: str) -> int:
    print(f"attnx report: {message}", file=sys.stderr)
    return 2


def _finish(study: Study, written: list[Path]) -> int:
    left_out = left_out_table(study)
    if left_out:  # the header scripts split on; it lists lost and invalid records too
        print(f"runs that did not complete:\n{markdown_table(left_out.header, left_out.body)}\n")
    print(f"{outcome(study.runs)}; wrote {', '.join(map(str, written))}")
    if all(r.get("_lost") for r in study.runs):  # not even a failed run's record: a script must know
        where = written[0]
        print(f"attnx report: nothing to report: {outcome(study.runs)} ({where} says why)", file=sys.stderr)
        return 1
    return 0


def unknown_key(
    args: Any,
    panels: list[str],
    by: str,
    columns: list[str],
    numeric: list[str],
    measured: list[str],
    panels_known: list[str],
) -> str | None:
    """The first option that names a key the runs do not have, as a refusal naming those they do."""
    swept = ", ".join(columns) or "(none)"
    unplottable = [x for x in args.x or [] if x not in numeric]
    if unplottable:
        return f"--x {unplottable[0]} is not a swept numeric key; swept: {', '.join(numeric) or '(none)'}"
    unknown = [p for p in panels if p not in panels_known]
    if unknown:
        return f"--panel {unknown[0]} is not a swept key; swept: {swept}"
    if args.select is not None and args.select not in columns:
        return f"--select {args.select} is not a swept key; swept: {swept}"
    if args.select is not None and measured and by not in measured:
        return f"--by {by}: no completed run has it; metrics: {', '.join(measured)}"
    return None


def varies(runs: list[dict[str, Any]], key: str, numeric: bool = False) -> bool:
    """Whether `key`'s resolved value (a config entry, a choice) differs between the runs."""
    values = [value(r, key) for r in runs]
    return len({text(v) for v in values}) > 1 and (not numeric or is_numeric(values))


def mark_stale(runs: list[dict[str, Any]]) -> None:
    """`running` whose process is gone (kill -9, a lost node) is `stale`, with who it was; a live one
    says who runs it."""
    for run in runs:
        run["status"] = status(run, run["_path"])
        who = f"pid {run.get('pid')} on {run.get('host')}"
        if run["status"] == "stale":
            run["error"] = f"{who} ended without a record (killed?)"
        elif run["status"] == "running":
            run["error"] = f"still running: {who} holds its lock"


def parse_baseline(
    spec: str | None, runs: list[dict[str, Any]], columns: list[str]
) -> tuple[str | None, Any]:
    """`KEY=VALUE` as (key, the value as the runs hold it); ValueError naming what exists otherwise."""
    if spec is None:
        return None, None
    key, sep, wanted = spec.partition("=")
    if not sep or not key:
        raise ValueError(f"--baseline {spec}: write KEY=VALUE, e.g. attention=additive")
    if key not in columns:
        raise ValueError(f"--baseline {key} is not a swept key; swept: {', '.join(columns) or '(none)'}")
    values = {text(value(r, key)): value(r, key) for r in runs if r.get("status") == "completed"}
    if wanted not in values:
        raise ValueError(f"--baseline {key}={wanted}: no completed run has it; {key} is {', '.join(values)}")
    return key, values[wanted]


def read_bench(path: Path, n: int | None) -> tuple[int, dict[str, float]]:
    """(N, mechanism -> forward ms at N) from an `attnx bench` CSV's attention rows (the largest N all
    of them reached, unless `n` is given)."""
    try:
        with path.open(newline="") as handle:
            rows = [r for r in csv.DictReader(handle) if r.get("kind") == "attention"]
    except OSError as error:
        raise ValueError(f"--bench {path}: {error.strerror}") from None
    if not rows or "fwd_ms" not in rows[0]:
        raise ValueError(f"--bench {path}: not an attnx bench CSV with attention rows")
    by_name: dict[str, dict[int, float]] = {}
    for r in rows:
        by_name.setdefault(r["name"], {})[int(r["n"])] = float(r["fwd_ms"])
    reached = set.intersection(*(set(times) for times in by_name.values()))
    if n is None:
        if not reached:
            raise ValueError(f"--bench {path}: no N that every mechanism reached; give --bench-n")
        n = max(reached)
    elif n not in reached:
        raise ValueError(f"--bench-n {n}: not measured for every mechanism; N in {sorted(reached)}")
    return n, {name: times[n] for name, times in by_name.items()}


def write(study: Study, out: Path, parts: list[Section], title: str = "attnx report") -> list[Path]:
    """report.md, report.csv, verdicts.csv (when there are pairs) and report.html in `out`, and the figures
    already there; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "report.csv", study)
    tables = [out / "report.csv"]
    if study.verdicts is not None and study.verdicts.pairs:
        write_verdicts(out / "verdicts.csv", study)
        tables.append(out / "verdicts.csv")
    (out / "report.md").write_text(markdown(title, parts, out))
    (out / "report.html").write_text(page(title, parts, text(study.highlight) if study.highlight else None))
    figures = [p.path for s in parts for p in s.parts if isinstance(p, Image) and p.path.parent == out]
    return [out / "report.md", *tables, out / "report.html", *figures]


def write_verdicts(path: Path, study: Study) -> None:
    """One row per pair of every cell: its figures and its verdict, as the Statistics section shows them
    (an undefined figure is empty, with why in `d_z_note`: never inf)."""
    grouped, verdicts = study.cells(), study.verdicts
    assert grouped is not None and verdicts is not None
    key = grouped.key
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [*grouped.columns, f"{key} a", f"{key} b", "family", "n", "mean_difference", "ci_low", "ci_high"]
            + ["d_z", "d_z_ci_low", "d_z_ci_high", "d_z_note", "mde", "test", "p", "m", "floor", "p_holm"]
            + ["outcome", "verdict", "alpha"]
        )
        for v in verdicts.pairs:
            r = v.result
            writer.writerow(
                [*v.cell, v.a, v.b, v.family, r.n, r.mean if r.n else None, *(r.ci or (None, None))]
                + [
                    r.d_z,
                    *(r.d_z_ci or (None, None)),
                    r.d_z_note,
                    r.mde,
                    r.test,
                    r.p,
                    v.m if r.n > 1 else None,
                ]
                + [v.floor, v.p_adjusted, v.outcome, v.words, v.alpha]
            )


def write_csv(path: Path, study: Study) -> None:
    """One row per configuration (and per run left out): its values, metrics over seeds and costs, with
    the decoding state in bytes where the study has it (`--pareto state`)."""
    state = study.state_bytes
    metrics, costs = study.metrics, [key for key, _ in COSTS] + (["state_bytes"] if state is not None else [])
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        intervals = [f"{m} {end}" for m in metrics for end in ("ci_low", "ci_high")]
        writer.writerow(
            [*study.columns, "status", "n", *metrics, *(f"{m} std" for m in metrics), *intervals, *costs]
            + ["converged", "error", "folders"]
        )
        for row in study.rows:
            summaries = [stats.summarize(row.found(m)) if row.found(m) else None for m in metrics]
            writer.writerow(
                [*row.values, "completed", len(row.runs)]
                + [row.mean(m) for m in metrics]
                + [row.std(m) for m in metrics]
                + [end for s in summaries for end in (s.ci if s is not None and s.ci else (None, None))]
                + [row.mean(key, metric=False) for key, _ in COSTS]
                + ([state.get(row.values)] if state is not None else [])
                + [converged_text(row), "", " ".join(r["_path"] for r in row.runs)]
            )
        for run in study.left_out:
            writer.writerow(
                [*(value(run, c) for c in study.columns), run.get("status"), 1]
                + [""] * (4 * len(metrics) + len(costs) + 1)
                + [first_line(run.get("error")), run["_path"]]
            )
