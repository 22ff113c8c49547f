"""The sections of an `attnx report`: results with bootstrap intervals, the statistics of one compared
key within cells (`attnx.report.statistics_section`), cost with Pareto plots, figures and heatmaps, and every
run folder found, with why any was left out of them (`attnx.report.runs`: no record, unreadable, invalid,
not completed). A `Study` (`attnx.report.study`) says what they are made of; `sections` turns it into
`attnx.report.document` parts that `attnx.report.cli` writes as Markdown, CSV and one HTML page, and
`attnx.compare.report` wraps with its ranking.
"""

from __future__ import annotations

import os
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from attnx.report import stats
from attnx.report.document import Image, Section, Table
from attnx.report.figures import curve_plot, length_plot, line_plot, pareto_plot, state_plot
from attnx.report.runs import NOT_SWEPT, Row, overrides, sort_key, text, undeclared, value
from attnx.report.significance import Cells, convergence
from attnx.report.statistics_section import statistics_section
from attnx.report.study import Study
from attnx.track.results import RUN_FOLDER

COSTS = (("params", "params"), ("train_seconds", "train s"), ("samples_per_second", "samples/s"))
NOISES = {  # a verdict's `noise_source` (attnx.track.convergence), in words
    "binomial": "the binomial error of a share of the validation examples",
    "curve": "the curve's own scatter",
}
HEATMAP_KINDS = ("cross", "pooling", "self_layer")  # the map a row shows: its site's, else the last layer's


def sections(study: Study, out: Path, xs: list[str], panels: list[str]) -> list[Section]:
    """The report: its results, statistics, costs, figures and run folders, in that order."""
    out.mkdir(parents=True, exist_ok=True)
    grouped = study.cells()
    results: list[str | Table] = [results_table(study), *best_lines(study), *convergence_lines(study)]
    found = [intro(study), Section("Results", results)]
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
    if study.state_bytes is not None and study.key is not None:
        metric, higher = study.metrics[0], study.higher(study.metrics[0])
        figures.append(
            state_plot(study.rows, study.columns, study.key, study.state_bytes, metric, out, panels, higher)
        )
    if grouped is not None:
        figures.append(length_plot(grouped, "test/exact_match", out, study.highlight))
        figures.append(curve_plot(grouped, out, study.highlight))
    images = [Image(p, p.stem.replace("_", " ")) for p in figures if p]
    if grouped is not None:
        images += heatmaps(grouped)
    if images:
        found.append(Section("Figures", images))
    found.append(folders_section(study))
    return found


def intro(study: Study) -> Section:
    runs = [r for r in study.runs if not r.get("_lost")] or study.runs
    common = {k: v for k, v in overrides(runs[0]).items() if k not in study.columns and k not in NOT_SWEPT}
    common = {k: v for k, v in common.items() if all(overrides(r).get(k) == v for r in runs)}
    parts = [f"{outcome(study.runs)}."]
    if common:
        parts.append("Common to every run: " + ", ".join(f"`{k}={text(v)}`" for k, v in common.items()) + ".")
    return Section("", parts)


def results_table(study: Study) -> Table:
    """A row per configuration: its values, its seed count, mean ± std [95% CI] per metric, how many of
    its runs converged (when records say), its costs."""
    seeds = any(len(row.runs) > 1 for row in study.rows)
    judged = any(verdicts(row) for row in study.rows)
    header = [*study.columns, *(["n"] if seeds else []), *study.metrics, *(["converged"] if judged else [])]
    header += [label for _, label in COSTS]
    body = []
    for row in study.rows:
        cells_ = [text(v) for v in row.values] + ([str(len(row.runs))] if seeds else [])
        cells_ += [summary_text(row, m) for m in study.metrics]
        cells_ += [converged_text(row) or "–"] if judged else []
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


def verdicts(row: Row) -> list[dict[str, Any]]:
    """The convergence verdicts (attnx.track.convergence) of a configuration's runs that recorded one."""
    return [run["convergence"] for run in row.runs if isinstance(run.get("convergence"), dict)]


def converged_text(row: Row) -> str:
    """`converged 3/3`, or `still improving (1 of 3)` when any run is (`significance.convergence`, as
    the compare report says it); empty when no run has a verdict (too few validations, or a record from
    before curves were kept)."""
    counted = convergence(row)
    return str(counted) if counted.converged or counted.improving else ""


def convergence_lines(study: Study) -> list[str]:
    """The rule behind the `converged` column, with the metrics and tolerances the runs were judged by."""
    judged = [v for row in study.rows for v in verdicts(row)]
    if not judged:
        return []
    metrics = ", ".join(sorted({str(v.get("metric")) for v in judged}))
    tolerances = ", ".join(f"{t:g}" for t in sorted({float(v.get("tolerance", 0)) for v in judged}))
    sources = ", ".join(
        sorted({NOISES.get(str(v.get("noise_source")), "the curve's scatter") for v in judged})
    )
    return [
        "Converged k/n: k of the configuration's n runs converged; still improving (i of n): i did not. "
        f"A run converged when its validation curve of {metrics} reached the metric's ceiling within the "
        f"tolerance ({tolerances}), or when the mean of its last quarter of validations improved on the "
        "mean of the quarter before by less than the tolerance plus two standard errors of one "
        f"validation's noise ({sources}); fewer validations than `convergence.min_validations` give no "
        "verdict, and a run without one does not count as still improving. A configuration still improving "
        "was stopped by its budget: its figures say as much about the budget as about the model (raise "
        "`trainer.max_epochs`, or set `convergence.stop=true` with a larger one)."
    ]


def best_lines(study: Study) -> list[str]:
    lines = []
    for metric in study.metrics:
        scored = [(m, row) for row in study.rows if (m := row.mean(metric)) is not None]
        if scored:
            pick = max if study.higher(metric) else min
            best, row = pick(scored, key=lambda item: item[0])
            where = (
                ", ".join(f"{c}={text(v)}" for c, v in zip(study.columns, row.values))
                or "the only configuration"
            )
            lines.append(f"Best {metric}: {best:.4f} ({where}).")
    assumed = undeclared([r for row in study.rows for r in row.runs], study.metrics)
    if assumed:
        lines.append(
            f"No record or model type declares the direction of {', '.join(assumed)} (records from before "
            "results.json kept `metric_declarations`): taken as higher is better."
        )
    if any(len(row.runs) > 1 for row in study.rows):
        lines.append(
            "± is the standard deviation over seeds, [ ] the 95% percentile-bootstrap interval of the mean "
            "(with few seeds it spans little more than the seeds themselves)."
        )
    return lines


def cost_section(study: Study, grouped: Cells, out: Path) -> Section:
    """A cost table (results.json's parameters and training time; `attnx bench`'s inference time, or each
    model's decoding state when the study has them) and one Pareto plot per cell. A row whose model
    declares no state is listed as such, never dropped."""
    metric = study.metrics[0]
    state = study.state_bytes
    third = "state bytes" if state is not None else f"infer ms @ N={study.bench_n}" if study.bench_n else None
    compiled = any(compiling(row) for by_value in grouped.rows.values() for row in by_value.values())
    header = [
        "cell",
        grouped.key,
        metric,
        "params",
        "train s",
        *(["of which compiling"] if compiled else []),
        *([third] if third else []),
    ]
    body, images, undeclared = [], [], []
    for cell, by_value in grouped.rows.items():
        points = []
        for v, row in by_value.items():
            costs = {
                "params": row.mean("params", metric=False),
                "train_seconds": row.mean("train_seconds", metric=False),
            }
            if state is not None:
                found = state.get(row.values)
                costs["state_bytes"] = None if found is None else float(found)
                shown = "undeclared" if found is None else f"{found:,}"
                undeclared += [f"{text(v)} ({grouped.label(cell)})"] if found is None else []
            else:
                costs["infer_ms"] = (study.inference_ms or {}).get(v)
                shown = _ms(costs["infer_ms"])
            quality = row.mean(metric)
            body.append(
                [
                    grouped.label(cell),
                    text(v),
                    "–" if quality is None else f"{quality:.3f}",
                    _cost(costs["params"], "params"),
                    _cost(costs["train_seconds"], "train_seconds"),
                    *([compiling(row)] if compiled else []),
                    *([shown] if third else []),
                ]
            )
            if quality is not None:
                points.append((text(v), quality, costs))
        path = pareto_plot(
            grouped.label(cell),
            points,
            metric,
            out,
            text(study.highlight),
            third or "inference ms",
            study.higher(metric),
        )
        if path:
            images.append(Image(path, f"{grouped.label(cell)}: {metric} against cost"))
    if state is not None:
        note = (
            "State bytes: the numbers a model keeps per sequence to decode the next token after the task's "
            "longest test sequence (`state_size`), times the bytes of its parameters' dtype."
        )
        if undeclared:
            note += " No declared state, so not on the state axis: " + ", ".join(undeclared) + "."
    elif third:
        note = "Inference ms: `attnx bench`'s forward time per mechanism as self-attention, "
        note += f"N = {study.bench_n}."
    else:
        note = "Give `--bench bench.csv` (from `attnx bench`) to add inference time."
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
    runs = sorted(row.runs, key=lambda r: sort_key(value(r, "seed")))
    for run in runs:
        folder = Path(run["_path"]) / "attention_maps" / "test"
        for kind in HEATMAP_KINDS:
            found = sorted(folder.glob(f"{kind}*_0.png"))
            if found:
                return found[-1]
    return None


def folders_section(study: Study) -> Section:
    """Every run folder found: the completed ones by name, then each one left out with why."""
    paths = [os.path.abspath(r["_path"]) for r in study.runs]  # DIRs may be relative, or some of them
    root = os.path.commonpath(paths) if len(paths) > 1 else os.path.dirname(paths[0])
    done = [f"`{os.path.relpath(p, root)}`" for p, r in zip(paths, study.runs) if r["status"] == "completed"]
    parts: list[str | Table | Image] = [
        f"{len(paths)} run folder{'s' if len(paths) > 1 else ''} under `{root}` ({RUN_FOLDER}). "
        f"Completed, in the tables and figures: {len(done)}" + (f" ({', '.join(done)})." if done else ".")
    ]
    table = left_out_table(study)
    if table is not None:
        parts += [
            f"Left out of every table, ranking, statistic and figure: {len(table.body)}, with why.",
            table,
        ]
    return Section("Run folders", parts)


def left_out_table(study: Study) -> Table | None:
    if not study.left_out:
        return None
    body = [
        [
            *(text(value(r, c)) for c in study.columns),
            str(r.get("status")),
            first_line(r.get("error")),
            r["_path"],
        ]
        for r in study.left_out
    ]
    return Table([*study.columns, "status", "why", "folder"], body, id="left_out")


def outcome(runs: list[dict[str, Any]]) -> str:
    """`4/7 runs completed; 1 failed, 1 interrupted, 1 stale`."""
    done = sum(r["status"] == "completed" for r in runs)
    others = Counter(r["status"] for r in runs if r["status"] != "completed")
    rest = ", ".join(f"{n} {state}" for state, n in sorted(others.items()))
    return f"{done}/{len(runs)} runs completed" + (f"; {rest}" if rest else "")


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def compiling(row: Row) -> str:
    """A configuration's mean compile seconds per run that compiled regions (results.json's `compile`),
    and how many of its runs generated code (Inductor cache misses) rather than finding it cached: the
    runs that paid for the others. Empty when none compiled."""
    found = [run["compile"] for run in row.runs if isinstance(run.get("compile"), dict)]
    if not found:
        return ""
    seconds = statistics.fmean(float(c.get("seconds", 0.0)) for c in found)
    paid = sum(bool(c.get("cache_misses")) for c in found)
    return f"{seconds:.1f} ({paid} of {len(found)} compiled afresh)"


def _cost(v: float | None, key: str) -> str:
    if v is None:
        return "–"
    return f"{v:,.0f}" if key != "train_seconds" else f"{v:.1f}"


def first_line(error: Any) -> str:
    line = next(iter(str(error or "").strip().splitlines()), "")
    return line if len(line) <= 120 else line[:117] + "..."
