"""`attnx report DIR [DIR ...]`: one comparison, with its statistics and figures, from every results.json
under DIRs.

A row is one configuration (`attnx.runs`): runs that differ only by `seed` share a row, as mean ±
std with a 95% bootstrap interval over the seeds. The statistics (`attnx.significance`) compare the
values of one key within each cell of the other columns: `--baseline attention=additive` pairs
every row with the cell's additive row seed by seed (mean difference, exact test, Holm across the
comparisons), and for the same key (`attention` when no baseline is given) a win/tie/loss matrix and
a rank table across cells. `--bench bench.csv` joins `attnx bench`'s inference time at one N to the
costs. Runs that did not complete are listed apart with their status and error.

Writes report.md (with PNG figures beside it), report.csv and report.html (the same, one
self-contained page), and prints the table. `--select optim.lr` reports each configuration at its
best learning rate on validation, as papers tune per cell. Never imports torch.
"""

from __future__ import annotations

import csv
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnx import stats
from attnx.cli import ArgumentParser
from attnx.document import Image, Section, Table, markdown, page
from attnx.figures import length_plot, line_plot, pareto_plot
from attnx.runs import (
    NOT_SWEPT,
    Row,
    default_metrics,
    group,
    is_numeric,
    load,
    lower_is_better,
    overrides,
    select,
    swept_columns,
    text,
    value,
)
from attnx.significance import Cells, against_baseline, cells, mean_rank, ranks, win_matrix
from attnx.table import markdown_table
from attnx.track.results import status

COSTS = (("params", "params"), ("train_seconds", "train s"), ("samples_per_second", "samples/s"))
HEATMAP_KINDS = ("cross", "pooling", "self_layer")  # the map a row shows: its site's, else the last layer's


@dataclass
class Study:
    """What a report is made of: the runs, their rows, and what the statistics compare."""

    runs: list[dict[str, Any]]  # every record, completed or not, with its folder as `_path`
    columns: list[str]
    metrics: list[str]  # the first is the one compared, plotted and ranked
    rows: list[Row]
    key: str | None = None  # the compared key: the baseline's, or `attention` when it is swept
    baseline: Any = None  # the key's baseline value, None for no paired comparison
    tuned: list[str] = field(default_factory=list)  # keys chosen per row, left out of a cell's identity
    inference_ms: dict[Any, float] | None = None  # the key's value -> `attnx bench` forward ms at one N
    bench_n: int | None = None
    highlight: Any = None  # the key's value to mark (a candidate)

    @property
    def unfinished(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if r.get("status") != "completed"]

    def cells(self) -> Cells | None:
        return cells(self.rows, self.columns, self.key, self.tuned) if self.key in self.columns else None


def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="attnx report", description=__doc__.splitlines()[0])
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
    parser.add_argument("--bench", type=Path, help="an `attnx bench` bench.csv: inference ms joins the costs")
    parser.add_argument("--bench-n", type=int, help="the N of --bench's rows to use (default: the largest)")
    parser.add_argument(
        "--out", type=Path, help="where report.md/.csv/.html/.png go (default: the first DIR)"
    )
    args = parser.parse_args(argv)

    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        return _refuse(f"no such folder: {', '.join(missing)}")
    runs = load(args.dirs)
    if not runs:  # a folder without runs is a mistyped path, as much as a missing one
        return _refuse(f"no readable results.json under {', '.join(map(str, args.dirs))}")
    mark_stale(runs)
    columns = swept_columns(runs)
    done = [r for r in runs if r.get("status") == "completed"]
    metrics = [m for item in args.metric for m in item.split(",")] if args.metric else default_metrics(done)
    measured = sorted({m for r in done for m in r.get("metrics", {})})
    absent = [m for m in metrics if m not in measured]
    if args.metric and done and absent:
        return _refuse(f"--metric {absent[0]}: no run has it; metrics: {', '.join(measured)}")
    numeric = [c for c in columns if is_numeric([value(r, c) for r in runs])]
    xs = args.x or numeric
    unknown = [x for x in xs if x not in numeric]
    if unknown:
        return _refuse(
            f"--x {unknown[0]} is not a swept numeric key; swept: {', '.join(numeric) or '(none)'}"
        )
    if args.select is not None and args.select not in columns:
        return _refuse(f"--select {args.select} is not a swept key; swept: {', '.join(columns) or '(none)'}")
    try:
        key, baseline = parse_baseline(args.baseline, runs, columns)
        inference = read_bench(args.bench, args.bench_n) if args.bench else None
    except ValueError as error:
        return _refuse(str(error))
    rows = group(done, columns)
    if args.select is not None:
        rows = select(rows, columns, args.select, args.by or metrics[0].replace("test/", "val/", 1))
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
    )
    out = args.out or args.dirs[0]
    panels = [p for item in args.panel or [] for p in item.split(",")]
    parts = sections(study, out, xs, panels)
    written = write(study, out, parts)
    for table in (
        t for s in parts for t in s.parts if isinstance(t, Table) and t.id in ("results", "baseline")
    ):
        print(markdown_table(table.header, table.body, right_from=table.right_from), end="\n\n")
    return _finish(study, written)


def _refuse(message: str) -> int:
    print(f"attnx report: {message}", file=sys.stderr)
    return 2


def _finish(study: Study, written: list[Path]) -> int:
    failed = failed_table(study)
    if failed:
        print(f"runs that did not complete:\n{markdown_table(failed.header, failed.body)}\n")
    print(f"{outcome(study.runs)}; wrote {', '.join(map(str, written))}")
    return 0


def mark_stale(runs: list[dict[str, Any]]) -> None:
    """`running` whose process is gone (kill -9, a lost node) is `stale`, with who it was."""
    for run in runs:
        run["status"] = status(run, run["_path"])
        if run["status"] == "stale":
            run["error"] = f"pid {run.get('pid')} on {run.get('host')} ended without a record (killed?)"


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


def sections(study: Study, out: Path, xs: list[str], panels: list[str]) -> list[Section]:
    """The report: its results, statistics, costs, figures and failures, in that order."""
    out.mkdir(parents=True, exist_ok=True)
    grouped = study.cells()
    found = [intro(study), Section("Results", [results_table(study), *best_lines(study)])]
    if grouped is not None and study.rows:
        found.append(statistics_section(study, grouped))
        found.append(cost_section(study, grouped, out))
    figures = [
        line_plot(
            study.rows,
            study.columns,
            study.metrics[0],
            x,
            out,
            panels,
            study.tuned[0] if study.tuned else None,
        )
        for x in xs
    ]
    if grouped is not None:
        figures.append(length_plot(grouped, "test/exact_match", out, study.highlight))
    images = [Image(p, p.stem.replace("_", " ")) for p in figures if p]
    if grouped is not None:
        images += heatmaps(grouped)
    if images:
        found.append(Section("Figures", images))
    failed = failed_table(study)
    if failed:
        found.append(Section("Runs that did not complete", [failed]))
    return found


def intro(study: Study) -> Section:
    runs = study.runs
    common = {k: v for k, v in overrides(runs[0]).items() if k not in study.columns and k not in NOT_SWEPT}
    common = {k: v for k, v in common.items() if all(overrides(r).get(k) == v for r in runs)}
    parts = [f"{outcome(runs)}."]
    if common:
        parts.append("Common to every run: " + ", ".join(f"`{k}={text(v)}`" for k, v in common.items()) + ".")
    return Section("", parts)


def results_table(study: Study) -> Table:
    """A row per configuration: its values, its seed count, mean ± std [95% CI] per metric, its costs."""
    seeds = any(len(row.runs) > 1 for row in study.rows)
    header = [*study.columns, *(["n"] if seeds else []), *study.metrics, *(label for _, label in COSTS)]
    body = []
    for row in study.rows:
        cells_ = [text(v) for v in row.values] + ([str(len(row.runs))] if seeds else [])
        cells_ += [summary_text(row, m) for m in study.metrics]
        cells_ += [_cost(row.mean(key, metric=False), key) for key, _ in COSTS]
        body.append(cells_)
    return Table(header, body, right_from=len(study.columns), id="results")


def summary_text(row: Row, metric: str) -> str:
    found = row.found(metric)
    if not found:
        return "–"
    s = stats.summarize(found)
    if s.std is None or s.ci is None:
        return f"{s.mean:.3f}"
    return f"{s.mean:.3f} ± {s.std:.3f} [{s.ci[0]:.3f}, {s.ci[1]:.3f}]"


def best_lines(study: Study) -> list[str]:
    lines = []
    for metric in study.metrics:
        scored = [(row.mean(metric), row) for row in study.rows if row.mean(metric) is not None]
        if scored:
            pick = min if lower_is_better(metric) else max
            best, row = pick(scored, key=lambda item: item[0])
            where = (
                ", ".join(f"{c}={text(v)}" for c, v in zip(study.columns, row.values))
                or "the only configuration"
            )
            lines.append(f"Best {metric}: {best:.4f} ({where}).")
    if any(len(row.runs) > 1 for row in study.rows):
        lines.append(
            "± is the standard deviation over seeds, [ ] the 95% percentile-bootstrap interval of the mean "
            "(with few seeds it spans little more than the seeds themselves)."
        )
    return lines


def statistics_section(study: Study, grouped: Cells) -> Section:
    metric, key = study.metrics[0], grouped.key
    seeds = sorted({len(row.by_seed(metric)) for row in study.rows})
    parts: list[str | Table] = [n_note(seeds)]
    if study.baseline is not None:
        parts.append(f"**Paired against `{key}={text(study.baseline)}`** on {metric}, seed by seed:")
        parts.append(baseline_table(study, grouped))
        parts.append(
            "Δ is the mean per-seed difference (row − baseline) with its 95% bootstrap interval; p is "
            f"two-sided, exact (sign-flip over seeds up to {stats.EXACT_MAX}, Wilcoxon signed-rank above), "
            "and Holm's adjustment is over every comparison in this table."
        )
    parts.append(
        f"**Wins, ties and losses** of each `{key}` (row) against each other (column) on {metric}: W when "
        "the 95% bootstrap interval of the paired difference lies wholly on the better side of 0, L wholly "
        "on the worse side, T otherwise."
    )
    parts += matrix_tables(grouped, metric)
    parts.append(f"**Ranks** by mean {metric} in each cell (1 = best; ties share their mean rank):")
    parts.append(rank_table(grouped, metric))
    return Section("Statistics", parts)


def n_note(seeds: list[int]) -> str:
    """What the seed counts allow a test to show, said plainly."""
    if not seeds or max(seeds) < 2:
        return "One seed per configuration: no interval and no test is possible (run `seed=0,1,2`)."
    n = min(seeds)
    counts = f"n = {n} seeds" if len(seeds) == 1 else f"n = {min(seeds)}–{max(seeds)} seeds"
    floor = stats.smallest_p(n)
    if floor >= stats.ALPHA:
        return (
            f"{counts} per configuration. With {n} paired seeds the smallest two-sided p an exact test can "
            f"give is {floor:.3f}, so no difference here can reach p < {stats.ALPHA}: "
            f"{stats.seeds_for()} seeds are the fewest that can."
        )
    return f"{counts} per configuration; the smallest attainable two-sided p is {floor:.4f}."


def baseline_table(study: Study, grouped: Cells) -> Table:
    comparisons = against_baseline(grouped, study.baseline, study.metrics[0])
    body = []
    for c in comparisons:
        r = c.result
        ci = f"[{r.ci[0]:+.3f}, {r.ci[1]:+.3f}]" if r.ci else "–"
        body.append(
            [
                grouped.label(c.cell),
                text(c.value),
                str(r.n),
                f"{r.mean:+.3f}",
                ci,
                r.test,
                _p(r.p),
                _p(c.p_holm),
                c.verdict(),
            ]
        )
    header = ["cell", grouped.key, "n", "Δ", "95% CI", "test", "p", "p (Holm)", "verdict"]
    return Table(header, body, right_from=2, id="baseline")


def matrix_tables(grouped: Cells, metric: str) -> list[str | Table]:
    values = grouped.values()
    found: list[str | Table] = []
    for cell, outcomes in win_matrix(grouped, metric).items():
        present = [v for v in values if v in grouped.rows[cell]]
        body = [[text(a), *(("·" if a == b else outcomes[(a, b)]) for b in present)] for a in present]
        found += [f"*{grouped.label(cell)}*", Table([grouped.key, *map(text, present)], body, right_from=1)]
    return found


def rank_table(grouped: Cells, metric: str) -> Table:
    ranked = ranks(grouped, metric)
    order = sorted(ranked, key=lambda v: mean_rank(ranked[v]))
    header = [grouped.key, *(grouped.label(cell) for cell in grouped.rows), "mean rank", "cells"]
    body = [
        [
            text(v),
            *(f"{ranked[v][cell]:g}" if cell in ranked[v] else "–" for cell in grouped.rows),
            f"{mean_rank(ranked[v]):.2f}",
            str(len(ranked[v])),
        ]
        for v in order
    ]
    return Table(header, body, right_from=1, id="ranks")


def cost_section(study: Study, grouped: Cells, out: Path) -> Section:
    """A cost table (results.json's parameters and training time, `attnx bench`'s inference time) and
    one Pareto plot per cell."""
    metric = study.metrics[0]
    infer = f"infer ms @ N={study.bench_n}" if study.bench_n else None
    header = ["cell", grouped.key, metric, "params", "train s", *([infer] if infer else [])]
    body, images = [], []
    for cell, by_value in grouped.rows.items():
        points = []
        for v, row in by_value.items():
            costs = {
                "params": row.mean("params", metric=False),
                "train_seconds": row.mean("train_seconds", metric=False),
                "infer_ms": (study.inference_ms or {}).get(v),
            }
            quality = row.mean(metric)
            body.append(
                [
                    grouped.label(cell),
                    text(v),
                    "–" if quality is None else f"{quality:.3f}",
                    _cost(costs["params"], "params"),
                    _cost(costs["train_seconds"], "train_seconds"),
                    *([_ms(costs["infer_ms"])] if infer else []),
                ]
            )
            if quality is not None:
                points.append((text(v), quality, costs))
        path = pareto_plot(
            grouped.label(cell), points, metric, out, text(study.highlight), infer or "inference ms"
        )
        if path:
            images.append(Image(path, f"{grouped.label(cell)}: {metric} against cost"))
    note = (
        f"Inference ms: `attnx bench`'s forward time per mechanism as self-attention, N = {study.bench_n}."
        if infer
        else "Give `--bench bench.csv` (from `attnx bench`) to add inference time."
    )
    return Section("Cost", [Table(header, body, right_from=2, id="cost"), note, *images])


def heatmaps(grouped: Cells) -> list[Image]:
    """Per cell, one heatmap per value of the key: its first seed's test-end map of the first example
    (the same input for every value, the split being seeded by the task alone)."""
    images = []
    for cell, by_value in grouped.rows.items():
        for v, row in by_value.items():
            path = heatmap_of(row)
            if path is not None:
                images.append(Image(path, f"{grouped.label(cell)}, {grouped.key}={text(v)}: {path.stem}"))
    return images


def heatmap_of(row: Row) -> Path | None:
    runs = sorted(row.runs, key=lambda r: str(value(r, "seed")))
    for run in runs:
        folder = Path(run["_path"]) / "attention_maps" / "test"
        for kind in HEATMAP_KINDS:
            found = sorted(folder.glob(f"{kind}*_0.png"))
            if found:
                return found[-1]
    return None


def failed_table(study: Study) -> Table | None:
    if not study.unfinished:
        return None
    body = [
        [
            *(text(value(r, c)) for c in study.columns),
            str(r.get("status")),
            _first_line(r.get("error")),
            r["_path"],
        ]
        for r in study.unfinished
    ]
    return Table([*study.columns, "status", "error", "folder"], body, id="failed")


def outcome(runs: list[dict[str, Any]]) -> str:
    """`4/7 runs completed; 1 failed, 1 interrupted, 1 stale`."""
    done = sum(r["status"] == "completed" for r in runs)
    others = Counter(r["status"] for r in runs if r["status"] != "completed")
    rest = ", ".join(f"{n} {state}" for state, n in sorted(others.items()))
    return f"{done}/{len(runs)} runs completed" + (f"; {rest}" if rest else "")


def write(study: Study, out: Path, parts: list[Section], title: str = "attnx report") -> list[Path]:
    """report.md, report.csv and report.html in `out`, and the figures already there; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "report.csv", study)
    (out / "report.md").write_text(markdown(title, parts, out))
    (out / "report.html").write_text(page(title, parts, text(study.highlight) if study.highlight else None))
    figures = [p.path for s in parts for p in s.parts if isinstance(p, Image) and p.path.parent == out]
    return [out / "report.md", out / "report.csv", out / "report.html", *figures]


def write_csv(path: Path, study: Study) -> None:
    metrics, costs = study.metrics, [key for key, _ in COSTS]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        intervals = [f"{m} {end}" for m in metrics for end in ("ci_low", "ci_high")]
        writer.writerow(
            [*study.columns, "status", "n", *metrics, *(f"{m} std" for m in metrics), *intervals, *costs]
            + ["error", "folders"]
        )
        for row in study.rows:
            summaries = [stats.summarize(row.found(m)) if row.found(m) else None for m in metrics]
            writer.writerow(
                [*row.values, "completed", len(row.runs)]
                + [row.mean(m) for m in metrics]
                + [row.std(m) for m in metrics]
                + [end for s in summaries for end in (s.ci if s is not None and s.ci else (None, None))]
                + [row.mean(key, metric=False) for key in costs]
                + ["", " ".join(r["_path"] for r in row.runs)]
            )
        for run in study.unfinished:
            writer.writerow(
                [*(value(run, c) for c in study.columns), run.get("status"), 1]
                + [""] * (4 * len(metrics) + len(costs))
                + [_first_line(run.get("error")), run["_path"]]
            )


def _p(p: float | None) -> str:
    return "–" if p is None else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def _cost(v: float | None, key: str) -> str:
    if v is None:
        return "–"
    return f"{v:,.0f}" if key != "train_seconds" else f"{v:.1f}"


def _first_line(error: str | None) -> str:
    line = next(iter((error or "").strip().splitlines()), "")
    return line if len(line) <= 120 else line[:117] + "..."
