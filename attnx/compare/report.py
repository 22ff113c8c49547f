"""The report of an `attnx compare`: `attnx report`'s sections over the compare's own runs, with a
ranking first, each (task, arm)'s convergence, a table per capability when the suite has them, each
task's arms at every test length when its runs have slices (`attnx.compare.slices`), which tasks pass
the discrimination rule (`attnx.compare.discrimination`), and the protocol (learning rates, grid points,
matched parameter counts or states) after. Under `protocol.grid` the tables score each (task, arm, seed)
by its best run over the grid (`attnx.compare.scores`).

Each run is labelled in memory with its suite task and its arm (`labels`: the report's `task` and
`mechanism` columns), and the metric each task compares is read into `test/metric` (`val/metric` in the
learning-rate search), so one table ranks tasks whose metrics differ by name. Job i of a phase's plan is
folder i of its sweep, so a run's arm is known from where it is, never guessed from its config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from attnx.compare.discrimination import discrimination
from attnx.compare.matching import Matched
from attnx.compare.plan import WEIGHT_DECAY, Arm, Job, validation_metric
from attnx.compare.scores import best_over_grid, capability_scores
from attnx.compare.slices import slices_section
from attnx.report import cli as report
from attnx.report import stats
from attnx.report.document import Image, Section, Table
from attnx.report.figures import line_plot
from attnx.report.runs import Row, read_run, text
from attnx.report.sections import sections
from attnx.report.significance import NOT_CONVERGED, Cells, convergence, mean_rank, ranks, win_matrix
from attnx.report.study import Study

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
    unmatched: dict[str, str] = field(default_factory=dict)  # task -> why matching left it as configured
    state: dict[tuple[str, str], int | None] | None = None  # (task, arm) -> state bytes, when pareto=state


def records(folder: Path, jobs: list[Job], cfg: DictConfig, metric_of: Any) -> list[dict[str, Any]]:
    """Job i's record from `folder/i` (`runs.read_run`: any status, or none, unreadable or invalid, with
    why), labelled, a completed one with its task's metric as `metric_of`'s key."""
    found = []
    for i, job in enumerate(jobs):
        record = read_run(folder / str(i))
        record["labels"] = {
            "task": job.task,
            "mechanism": job.arm.label,
            "seed": job.seed,
            "optim.lr": job.lr,
            WEIGHT_DECAY: job.weight_decay,
        }
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
    scored = best_over_grid(runs, METRIC) if gridded(cfg) else runs
    rows = _rows(scored, columns)
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
    )
    grouped = base.cells()
    summary, suite = intro(study, runs)
    parts = [summary, *([ranking(study, grouped), convergence_section(grouped)] if grouped else [])]
    if any(spec.get("capability") for spec in cfg.tasks.values()):
        parts.append(capability_section(study, scored))
    metrics = {str(task): str(spec.metric) for task, spec in cfg.tasks.items()}
    lengths = slices_section(rows, metrics, out, study.candidate.label)
    if lengths is not None:
        parts.append(lengths)
    if OmegaConf.select(cfg, "discrimination") is not None:
        parts.append(discrimination_section(study, rows))
    parts.append(suite)
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
            *power_note(len(cfg.seeds)),
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
        protocol = ["learning rate and weight decay: each run's best test score over the grid (see Protocol)"]
    else:
        protocol = [
            "learning rate " + ("searched (see Protocol)" if cfg.protocol.lr_search else "as configured")
        ]
    measure = _measure(cfg)
    protocol.append(f"widths matched by {measure} (see Protocol)" if measure else "widths as configured")
    parts.append("Protocol: " + "; ".join(protocol) + ".")
    return summary, Section("Suite", parts)


def power_note(n: int) -> list[str]:
    """What `n` paired seeds let the exact test show, when it is fewer than p < 0.01 needs."""
    needed = stats.seeds_for(STRICT_ALPHA)
    if n >= needed:
        return []
    return [
        f"With {n} seed{'s' if n > 1 else ''} the smallest two-sided p the exact paired test can give is "
        f"{stats.smallest_p(n):.3f}: p < {STRICT_ALPHA} needs {needed} seeds (`seeds={needed}`)."
    ]


STRICT_ALPHA = 0.01  # the level issue 24 asks a verdict to reach: 8 seeds (2 / 2^8 = 0.0078)


def ranking(study: CompareStudy, grouped: Cells) -> Section:
    """Arms by mean rank over the tasks, with each task's mean and 95% interval (marked when a run was still
    improving), and wins − losses."""
    ranked = ranks(grouped, METRIC)
    matrix = win_matrix(grouped, METRIC)
    order = sorted(ranked, key=lambda arm: mean_rank(ranked[arm]))
    header = ["mechanism", *(grouped.label(cell).removeprefix("task=") for cell in grouped.rows)]
    header += ["mean rank", "W/T/L/NC"]
    body = []
    for arm in order:
        cells_ = [_mean_ci(by_value[arm]) if arm in by_value else "n/a" for by_value in grouped.rows.values()]
        outcomes = [o for per_cell in matrix.values() for (a, _), o in per_cell.items() if a == arm]
        tally = "/".join(str(outcomes.count(o)) for o in ("W", "T", "L", "NC"))
        body.append([text(arm), *cells_, f"{mean_rank(ranked[arm]):.2f}", tally])
    note = (
        f"Each task's `{METRIC}`: mean over seeds [95% bootstrap interval], * when a run of it was still "
        "improving at the end of its budget (Convergence, below); rank 1 is best in a task; W/T/L counts the "
        "pairings against every other mechanism over all tasks (rule under Statistics), NC those in which "
        "either side was still improving: no win and no loss. The candidate, "
        f"`{study.candidate.label}`, is highlighted."
    )
    return Section("Ranking", [Table(header, body, right_from=1, id="ranking"), note])


def convergence_section(grouped: Cells) -> Section:
    """Mechanism x task: how many runs converged, or how many were still improving (results.json's
    `convergence`, `attnx.track.convergence`)."""
    arms = grouped.values()
    header = ["mechanism", *(grouped.label(cell).removeprefix("task=") for cell in grouped.rows)]
    body = [
        [
            text(arm),
            *(
                str(convergence(by_value[arm])) if arm in by_value else "n/a"
                for by_value in grouped.rows.values()
            ),
        ]
        for arm in arms
    ]
    rules = {
        (r["convergence"].get("metric"), r["convergence"].get("tolerance"))
        for by_value in grouped.rows.values()
        for row in by_value.values()
        for r in row.runs
        if isinstance(r.get("convergence"), dict)
    }
    tolerances = sorted({t for _, t in rules if t is not None})
    note = (
        "A run converged when its validation metric reached the task's ceiling, or when the mean of the last "
        "quarter of its validations improved on the quarter before by less than the tolerance "
        f"({', '.join(f'{t:g}' for t in tolerances) or 'not recorded'}; `convergence.tolerance`) plus two "
        "standard errors of the validations' own noise. A "
        f'difference with a side still improving is reported as "{NOT_CONVERGED}": it measures the '
        "budget, not the mechanism. – : no run recorded a verdict (too few validations, or an older run)."
    )
    return Section("Convergence", [Table(header, body, right_from=1, id="convergence"), note])


def discrimination_section(study: CompareStudy, rows: list[Row]) -> Section:
    """Which suite tasks pass the discrimination rule (`attnx.compare.discrimination`), with the figures."""
    cfg = study.cfg
    classic = {m for m in cfg.mechanisms if m != study.candidate.label}
    body = []
    for found in discrimination(cfg, rows, classic, METRIC):
        top = "none converged" if found.top is None else f"{found.top[0]} {found.top[1]:.3f}"
        means = list(found.means.items())
        span = "–" if found.span is None else f"{found.span:.3f} ({means[0][0]} − {means[-1][0]})"
        verdict = "passes" if found.passes else "fails: " + "; ".join(found.failing())
        body.append([found.task, f"{found.ceiling:g}", f"{found.bar:.3f}", top, span, verdict])
    rule = cfg.discrimination
    note = (
        f"A task discriminates when (a) a classic mechanism ({', '.join(sorted(classic))}) whose runs all "
        f"converged reaches at least {rule.ceiling_fraction:g} of the task's ceiling (its suite `ceiling:`, "
        f"else its metric's natural one) and (b) the best and worst classic mechanisms' means differ by at "
        f"least {rule.spread:g} (`discrimination.ceiling_fraction`, `discrimination.spread`). A task that "
        "fails (a) is too hard for its budget; one that fails (b) cannot tell the classic mechanisms apart."
    )
    header = ["task", "ceiling", "(a) needs", "(a) best converged", "(b) best − worst", "verdict"]
    return Section("Discrimination", [Table(header, body, right_from=1, id="discrimination"), note])


def capability_section(study: CompareStudy, scored: list[dict[str, Any]]) -> Section:
    """Arm x capability: each cell the mean ± standard deviation over seeds of the capability's score, the
    mean over its settings of each setting's score (MAD's, `attnx.compare.scores`)."""
    cfg = study.cfg
    found = capability_scores(scored, cfg.tasks, METRIC)
    names = list(dict.fromkeys(str(spec.get("capability") or task) for task, spec in cfg.tasks.items()))
    arms = list(dict.fromkeys(job.arm.label for job in study.jobs))
    body = []
    for arm in arms:
        cells_ = []
        for name in names:
            seeds = list(found.get(name, {}).get(arm, {}).values())
            s = stats.summarize(seeds) if seeds else None
            cells_.append("n/a" if s is None else f"{s.mean:.3f}" + (f" ± {s.std:.3f}" if s.std else ""))
        body.append([text(arm), *cells_])
    settings = "; ".join(
        f"{name}: {', '.join(t for t, spec in cfg.tasks.items() if str(spec.get('capability') or t) == name)}"
        for name in names
    )
    score = "its best test score over the grid" if gridded(cfg) else f"its `{METRIC}`"
    note = (
        f"A capability's score is the mean over its settings of each setting's score ({score}), per seed; "
        f"mean ± standard deviation over seeds (MAD, Poli et al. 2024). n/a: the mechanism lacks a setting's "
        f"score (it cannot run there, or a run did not complete). Settings: {settings}."
    )
    return Section(
        "Capabilities", [Table(["mechanism", *names], body, right_from=1, id="capabilities"), note]
    )


def gridded(cfg: DictConfig) -> bool:
    """Whether the runs are MAD's grid (`protocol.grid.enabled`; a config from before the key has none)."""
    return bool(OmegaConf.select(cfg, "protocol.grid.enabled", default=False))


def _measure(cfg: DictConfig) -> str | None:
    """What the widths were matched by, if anything."""
    return (
        "parameters"
        if cfg.protocol.match_params
        else "decoding state"
        if OmegaConf.select(cfg, "protocol.match_state", default=False)
        else None
    )


def _mean_ci(row: Row) -> str:
    s = stats.summarize(row.found(METRIC))
    improving = "*" if convergence(row).improving else ""
    return f"{s.mean:.3f}{improving}" + (f" [{s.ci[0]:.3f}, {s.ci[1]:.3f}]" if s.ci else "")


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
    if gridded(cfg):
        parts += grid_parts(study)
    if study.matched or study.unmatched:
        parts += matched_parts(study)
    return Section("Protocol", parts)


def grid_parts(study: CompareStudy) -> list[str | Table | Image]:
    """The grid, and per (task, mechanism) the points that scored best, with how many seeds chose each."""
    cfg = study.cfg
    runs = records(study.out / "runs", study.jobs, cfg, lambda job: (METRIC, cfg.tasks[job.task].metric))
    chosen: dict[tuple[str, str], list[str]] = {}
    for run in best_over_grid(runs, METRIC):
        labels = run["labels"]
        point = f"lr={labels['optim.lr']:g} wd={labels[WEIGHT_DECAY]:g}"
        chosen.setdefault((labels["task"], labels["mechanism"]), []).append(point)
    body = [
        [task, label, ", ".join(f"{p} ({points.count(p)})" for p in dict.fromkeys(points))]
        for (task, label), points in chosen.items()
    ]
    grid = cfg.protocol.grid
    return [
        f"**Grid** (MAD's protocol, Poli et al. 2024): every mechanism, task and seed trained at each "
        f"optim.lr in {list(grid.lr)} and {WEIGHT_DECAY} in {list(grid.weight_decay)}; each is scored by "
        "its best test metric over the grid, which is what the tables above report.",
        Table(["task", "mechanism", "best point (seeds)"], body),
    ]


def matched_parts(study: CompareStudy) -> list[str | Table | Image]:
    cfg = study.cfg
    state = _measure(cfg) == "decoding state"
    body = [
        [
            task,
            label,
            "undeclared" if m.value is None else f"{m.value:,}",
            f"{m.target:,}",
            "–" if m.ratio is None else f"{m.ratio - 1:+.1%}",
            "yes" if m.within else "**no**",
            " ".join(f"{k}={v}" for k, v in m.widths),
        ]
        for (task, label), m in study.matched.items()
    ]
    if state:
        intro = (
            f"**Decoding state matched** to `{cfg.baseline}`'s within ±{cfg.protocol.state_tolerance:.0%} "
            "by scaling each lm task's width keys together (MAD's iso-state comparison): numbers kept per "
            "sequence after the task's longest test sequence."
        )
    else:
        intro = (
            f"**Parameters matched** to `{cfg.baseline}`'s within ±{cfg.protocol.param_tolerance:.0%} by "
            "scaling each task's width keys together (the Long Range Arena's rule):"
        )
    parts: list[str | Table | Image] = [intro]
    if body:
        header = ["task", "mechanism", "state" if state else "params", "baseline", "Δ", "within", "widths"]
        parts.append(Table(header, body, right_from=2))
    if study.unmatched:
        lines = [f"{task}: {why}" for task, why in study.unmatched.items()]
        parts.append("Left at their configured widths: " + "; ".join(lines) + ".")
    return parts
