"""The report of an `attnx compare`: `attnx report`'s sections over the compare's own runs, with a
ranking first, each (task, arm)'s convergence, a table per capability when the suite has them, each
task's arms at every test length when its runs have slices (`attnx.compare.slices`), which tasks pass
the discrimination rule (`attnx.compare.discrimination`), and the protocol (learning rates, grid points,
matched parameter counts or states) after (`attnx.compare.conclusions`, `attnx.compare.protocol_section`).
Every verdict is the study's, decided once (`attnx.report.verdicts`): the family is the candidate against
each other arm of a task, at `alpha`, Holm-adjusted within each task (`family: task`) or over the suite.

Under `protocol.grid` each (task, arm, seed) is read at one grid point, chosen on validation unless
`protocol.grid.select=test` (MAD's own rule, labelled "optimistic (as MAD)"): `attnx.compare.scores`.

Each run is labelled in memory with its suite task and its arm, and each task's metric read into
`test/metric` (`attnx.compare.records`), so one table ranks tasks whose metrics differ by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from attnx.compare.conclusions import (
    budget_section,
    capability_section,
    convergence_section,
    discrimination_section,
    ranking,
)
from attnx.compare.keys import FAMILIES
from attnx.compare.matching import Matched
from attnx.compare.plan import Arm, Job
from attnx.compare.protocol_section import measure, protocol_section
from attnx.compare.records import METRIC, records
from attnx.compare.records import rows as group
from attnx.compare.scores import grid_rule, gridded, over_grid, rule_words
from attnx.compare.slices import slices_section
from attnx.report import cli as report
from attnx.report import stats
from attnx.report.document import Section, Table
from attnx.report.sections import sections
from attnx.report.study import Study
from attnx.report.verdicts import Procedure

STRICT_ALPHA = 0.01  # the level the default suite's seeds let a candidate's verdict reach


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
    unmatched: dict[str, str] = field(default_factory=dict)  # task -> why matching left it as configured
    state: dict[tuple[str, str], int | None] | None = None  # (task, arm) -> state bytes, when pareto=state
    attending: set[str] = field(default_factory=set)  # the arms whose mechanism hosts attention
    left_out: list[str] = field(default_factory=list)  # the suite's tasks `tasks=[...]` left out


def procedure(cfg: DictConfig) -> Procedure:
    """The decision procedure the compare's keys give (`alpha`, `family`, `budget_cap`); a config from before
    them has the defaults."""
    family = str(OmegaConf.select(cfg, "family", default="task"))
    return Procedure(
        float(OmegaConf.select(cfg, "alpha", default=stats.ALPHA)),
        FAMILIES.get(family, family),
        int(OmegaConf.select(cfg, "budget_cap", default=1)),
    )


def write_report(study: CompareStudy) -> list[Path]:
    cfg, out = study.cfg, study.out
    runs = records(out / "runs", study.jobs, cfg)
    columns = ["task", "mechanism"]
    scored = over_grid(runs, grid_rule(cfg)) if gridded(cfg) else runs
    rows = group(scored, columns)
    base = Study(
        runs,
        columns,
        [METRIC],
        rows,
        key="mechanism",
        baseline=cfg.baseline,
        # a suite task's own baseline (an lm task's reference is softmax attention, Zoology's), by cell
        baselines={(task,): spec.baseline for task, spec in cfg.tasks.items() if spec.get("baseline")},
        inference_ms=study.inference_ms,
        bench_n=cfg.bench.n,
        highlight=study.candidate.label,
        state_bytes=study.state,
        procedure=procedure(cfg),
        candidate=study.candidate.label,
    )
    grouped = base.cells()
    summary, suite = intro(study, runs, base)
    parts = [summary]
    if grouped:
        parts += [ranking(study, base, grouped), convergence_section(grouped, base.procedure.cap)]
    parts.append(budget_section(study, runs))
    if any(spec.get("capability") for spec in cfg.tasks.values()):
        parts.append(capability_section(study, scored))
    metrics = {str(task): str(spec.metric) for task, spec in cfg.tasks.items()}
    lengths = slices_section(rows, metrics, out, study.candidate.label, base.higher(METRIC))
    if lengths is not None:
        parts.append(lengths)
    if OmegaConf.select(cfg, "discrimination") is not None and grouped is not None:
        parts.append(discrimination_section(study, base, grouped))
    parts.append(suite)
    parts += sections(base, out, [], [])[1:]  # its intro counts runs; ours says what ran
    protocol = protocol_section(study, runs)
    if protocol.parts:
        parts.append(protocol)
    title = f"attnx compare: {study.candidate.label} against {', '.join(cfg.mechanisms)}"
    return report.write(base, out, parts, title)


def intro(study: CompareStudy, runs: list[dict[str, Any]], base: Study) -> tuple[Section, Section]:
    """The command and what came of it, first; the suite's tasks, the arms left out and the protocol."""
    cfg = study.cfg
    done = sum(run.get("status") == "completed" for run in runs)
    summary = Section(
        "",
        [
            f"`{' '.join(study.command)}`",
            f"Suite **{study.suite}**: {len(cfg.tasks)} tasks, seeds {list(cfg.seeds)}, "
            + (f"narrowed by `tasks=` (left out: {', '.join(study.left_out)}), " if study.left_out else "")
            + f"{done}/{len(study.jobs)} runs completed. Every arm of a task trains with the same seeds, so "
            "the same data order, and with `paired_embeddings=true`, so the same initial embeddings where "
            f"the shapes agree; runs with the same seed are paired in the statistics. `{METRIC}` is each "
            "task's own metric (Suite, below).",
            power_note(study, base),
        ],
    )
    body = []
    for task, spec in cfg.tasks.items():
        hosted = sorted({job.arm.label for job in study.jobs if job.task == task})
        at = f" (as `{spec.site}/attention`)" if spec.get("site") else ""
        body.append([task, spec.metric, ", ".join(hosted) + at, " ".join(f"`{o}`" for o in spec.overrides)])
    parts: list[str | Table] = [Table(["task", "metric", "mechanisms", "overrides"], body)]
    if study.refused:
        lines = [f"`{arm}` on {task}: {why}" for (task, arm), why in study.refused.items()]
        parts.append("Not applicable, so not run: " + "; ".join(lines) + ".")
    if gridded(cfg):
        protocol = ["learning rate and weight decay: " + rule_words(cfg) + " (see Protocol)"]
    else:
        protocol = [
            "learning rate "
            + ("searched on validation (see Protocol)" if cfg.protocol.lr_search else "as configured")
        ]
    matched = measure(cfg)
    protocol.append(f"widths matched by {matched} (see Protocol)" if matched else "widths as configured")
    parts.append("Protocol: " + "; ".join(protocol) + ".")
    return summary, Section("Suite", parts)


def power_note(study: CompareStudy, base: Study) -> str:
    """The candidate's family in words: its size per task, α, and the smallest adjusted p at these seeds,
    with the seeds a verdict at p < 0.01 would need where these cannot give one."""
    cfg, procedure_ = study.cfg, base.procedure
    n = len(cfg.seeds)
    hosted = {task: {job.arm.label for job in study.jobs if job.task == task} for task in cfg.tasks}
    sizes = {task: len(arms) - 1 for task, arms in hosted.items() if study.candidate.label in arms}
    if procedure_.span == "all":
        sizes = {"the suite": sum(sizes.values())} if sizes else {}
    words = []
    for where, m in sizes.items():
        floor = stats.smallest_p(n, m)
        strict = (
            ""
            if floor < STRICT_ALPHA
            else f"; p < {STRICT_ALPHA:g} needs {stats.seeds_for(STRICT_ALPHA, m)} seeds"
        )
        untestable = (
            f", untestable: p < α needs {stats.seeds_for(procedure_.alpha, m)} seeds"
            if floor >= procedure_.alpha
            else ""
        )
        words.append(f"{where}: m = {m}, floor {m}·2/2^{n} = {floor:.2g}{untestable}{strict}")
    span = "within each task" if procedure_.span == "cell" else "over every task at once (`family=suite`)"
    return (
        f"**Verdicts**: the candidate, `{study.candidate.label}`, against each other arm, paired by seed, "
        f"exact sign-flip test, Holm-adjusted {span}, α = {procedure_.alpha:g} (`alpha=`). With {n} seeds "
        "the smallest adjusted p is m·2/2ⁿ for m comparisons: "
        + ("; ".join(words) or "no task hosts it")
        + ". The classic arms' comparisons with each other are context, a family of their own."
    )
