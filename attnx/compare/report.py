"""The report of an `attnx compare`: `attnx report`'s sections over the compare's own runs, with a
ranking first and the protocol (learning rates, parameter counts) after.

Each run is labelled in memory with its suite task and its arm (`labels`: the report's `task` and
`mechanism` columns), and the metric each task compares is read into `test/metric` (`val/metric` in the
learning-rate search), so one table ranks tasks whose metrics differ by name. Job i of a phase's plan is
folder i of its sweep, so a run's arm is known from where it is, never guessed from its config.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from attnx.compare.matching import Matched
from attnx.compare.plan import Arm, Job, validation_metric
from attnx.report import cli as report
from attnx.report import stats
from attnx.report.document import Image, Section, Table
from attnx.report.figures import line_plot
from attnx.report.runs import Row, read_run, text
from attnx.report.sections import Study, sections
from attnx.report.significance import Cells, mean_rank, ranks, win_matrix

METRIC, VAL_METRIC = "test/metric", "val/metric"


@dataclass
class CompareStudy:
    """Everything a compare decided and ran."""

    out: Path
    cfg: DictConfig
    suite: str
    candidate: Arm
    jobs: list[Job]  # the final runs: job i in out/runs/i
    search: list[Job]  # the learning-rate search: job i in out/lr_search/i
    refused: dict[tuple[str, str], str]  # (task, arm) -> why the task cannot host the arm
    matched: dict[tuple[str, str], Matched]
    inference_ms: dict[str, float]
    command: list[str]


def records(folder: Path, jobs: list[Job], cfg: DictConfig, metric_of: Any) -> list[dict[str, Any]]:
    """Job i's record from `folder/i` (`runs.read_run`: any status, or none, unreadable or invalid, with
    why), labelled, a completed one with its task's metric as `metric_of`'s key."""
    found = []
    for i, job in enumerate(jobs):
        record = read_run(folder / str(i))
        record["labels"] = {"task": job.task, "mechanism": job.arm.label, "optim.lr": job.lr}
        key, metric = metric_of(job)
        if record["status"] == "completed" and metric in record["metrics"]:
            record["metrics"] = {**record["metrics"], key: record["metrics"][metric]}
        found.append(record)
    report.mark_stale(found)
    return found


def write_report(study: CompareStudy) -> list[Path]:
    cfg, out = study.cfg, study.out
    runs = records(out / "runs", study.jobs, cfg, lambda job: (METRIC, cfg.tasks[job.task].metric))
    columns = ["task", "mechanism"]
    rows = _rows(runs, columns)
    base = Study(
        runs,
        columns,
        [METRIC],
        rows,
        key="mechanism",
        baseline=cfg.baseline,
        inference_ms=study.inference_ms,
        bench_n=cfg.bench.n,
        highlight=study.candidate.label,
    )
    grouped = base.cells()
    summary, suite = intro(study, runs)
    parts = [summary, *([ranking(study, grouped)] if grouped else []), suite]
    parts += sections(base, out, [], [])[1:]  # its intro counts runs; ours says what ran
    protocol = protocol_section(study)
    if protocol.parts:
        parts.append(protocol)
    title = f"attnx compare: {study.candidate.label} against {', '.join(cfg.mechanisms)}"
    return report.write(base, out, parts, title)


def _rows(runs: list[dict[str, Any]], columns: list[str]) -> list[Row]:
    rows: dict[tuple[Any, ...], Row] = {}
    for run in runs:
        if run.get("status") == "completed":
            values = tuple(run["labels"][c] for c in columns)
            rows.setdefault(values, Row(values, [])).runs.append(run)
    return list(rows.values())


def intro(study: CompareStudy, runs: list[dict[str, Any]]) -> tuple[Section, Section]:
    """The command and what came of it, first; the suite's tasks, the arms left out and the protocol."""
    cfg = study.cfg
    done = sum(run.get("status") == "completed" for run in runs)
    summary = Section(
        "",
        [
            f"`{' '.join(study.command)}`",
            f"Suite **{study.suite}**: {len(cfg.tasks)} tasks, seeds {list(cfg.seeds)}, "
            f"{done}/{len(study.jobs)} runs completed. Every arm of a task trains with the same seeds, so "
            "the same data order, and with `paired_embeddings=true`, so the same initial embeddings where "
            f"the shapes agree; runs with the same seed are paired in the statistics. `{METRIC}` is each "
            "task's own metric (Suite, below).",
        ],
    )
    body = []
    for task, spec in cfg.tasks.items():
        hosted = sorted({job.arm.label for job in study.jobs if job.task == task})
        body.append([task, spec.metric, ", ".join(hosted), " ".join(f"`{o}`" for o in spec.overrides)])
    parts: list[str | Table] = [Table(["task", "metric", "mechanisms", "overrides"], body)]
    if study.refused:
        lines = [f"`{arm}` on {task}: {why}" for (task, arm), why in study.refused.items()]
        parts.append("Not applicable, so not run: " + "; ".join(lines) + ".")
    protocol = ["learning rate " + ("searched (see Protocol)" if cfg.protocol.lr_search else "as configured")]
    protocol.append("widths matched (see Protocol)" if cfg.protocol.match_params else "widths as configured")
    parts.append("Protocol: " + "; ".join(protocol) + ".")
    return summary, Section("Suite", parts)


def ranking(study: CompareStudy, grouped: Cells) -> Section:
    """Arms by mean rank over the tasks, with each task's mean and 95% interval, and wins − losses."""
    ranked = ranks(grouped, METRIC)
    matrix = win_matrix(grouped, METRIC)
    order = sorted(ranked, key=lambda arm: mean_rank(ranked[arm]))
    header = ["mechanism", *(grouped.label(cell).removeprefix("task=") for cell in grouped.rows)]
    header += ["mean rank", "W/T/L"]
    body = []
    for arm in order:
        cells_ = [_mean_ci(by_value[arm]) if arm in by_value else "n/a" for by_value in grouped.rows.values()]
        outcomes = [o for per_cell in matrix.values() for (a, _), o in per_cell.items() if a == arm]
        tally = "/".join(str(outcomes.count(o)) for o in ("W", "T", "L"))
        body.append([text(arm), *cells_, f"{mean_rank(ranked[arm]):.2f}", tally])
    note = (
        f"Each task's `{METRIC}`: mean over seeds [95% bootstrap interval]; rank 1 is best in a task; W/T/L "
        "counts the pairings against every other mechanism over all tasks (rule under Statistics). The "
        f"candidate, `{study.candidate.label}`, is highlighted."
    )
    return Section("Ranking", [Table(header, body, right_from=1, id="ranking"), note])


def _mean_ci(row: Row) -> str:
    s = stats.summarize(row.found(METRIC))
    return f"{s.mean:.3f}" + (f" [{s.ci[0]:.3f}, {s.ci[1]:.3f}]" if s.ci else "")


def protocol_section(study: CompareStudy) -> Section:
    cfg, out = study.cfg, study.out
    parts: list[str | Table | Image] = []
    if study.search:
        runs = records(
            out / "lr_search", study.search, cfg, lambda job: (VAL_METRIC, validation_metric(cfg, job.task))
        )
        columns = ["task", "mechanism", "optim.lr"]
        rows = _rows(runs, columns)
        path = line_plot(rows, columns, VAL_METRIC, "optim.lr", out, ["task"], name="lr_sensitivity.png")
        chosen = {(job.task, job.arm.label): job.lr for job in study.jobs}
        body = [[task, label, "–" if lr is None else f"{lr:g}"] for (task, label), lr in chosen.items()]
        parts += [
            f"**Learning rate**: every mechanism trained at each of {list(cfg.protocol.lr_grid)} with seed "
            f"{cfg.seeds[0]}; the best `{VAL_METRIC}` (the validation twin of each task's metric) was "
            "rerun over the seeds and is what the tables above report.",
            Table(["task", "mechanism", "optim.lr"], body),
        ]
        if path:
            parts.append(Image(path, "learning-rate sensitivity: validation metric against optim.lr"))
    if study.matched:
        body = [
            [
                task,
                label,
                f"{m.params:,}",
                f"{m.target:,}",
                f"{m.ratio - 1:+.1%}",
                "yes" if m.within else "**no**",
                " ".join(f"{k}={v}" for k, v in m.widths),
            ]
            for (task, label), m in study.matched.items()
        ]
        parts += [
            f"**Parameters matched** to `{cfg.baseline}`'s within ±{cfg.protocol.param_tolerance:.0%} by "
            "scaling each task's width keys together (the Long Range Arena's rule):",
            Table(["task", "mechanism", "params", "baseline", "Δ", "within", "widths"], body, right_from=2),
        ]
    return Section("Protocol", parts)
