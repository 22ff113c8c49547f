"""What a compare concludes, the sections of its report that read the verdicts: the ranking (each arm's mean
per task and its tally of verdicts), each (task, arm)'s convergence, which tasks pass the discrimination
rule (`attnx.compare.discrimination`), and the capability table. Every W, T, L, NC and U here is the
study's verdict (`Study.verdicts`, `attnx.report.verdicts`), the one the Statistics section shows."""

from __future__ import annotations

from statistics import fmean
from typing import TYPE_CHECKING, Any

from attnx.compare.discrimination import discrimination
from attnx.compare.scores import METRIC, OPTIMISTIC, capability_scores, grid_rule, gridded
from attnx.report import stats
from attnx.report.document import Section, Table
from attnx.report.runs import Row, declared, text
from attnx.report.significance import Cells, convergence, mean_rank, ranks
from attnx.report.study import Study
from attnx.report.verdicts import OUTCOMES, not_converged

if TYPE_CHECKING:
    from attnx.compare.report import CompareStudy


def ranking(study: CompareStudy, base: Study, grouped: Cells) -> Section:
    """Arms by mean rank over the tasks, with each task's mean and 95% interval (marked when a run was still
    improving), and the tally of their verdicts."""
    verdicts = base.verdicts
    assert verdicts is not None
    ranked = ranks(grouped, METRIC, base.higher(METRIC))
    order = sorted(ranked, key=lambda arm: mean_rank(ranked[arm]))
    header = ["mechanism", *(grouped.label(cell).removeprefix("task=") for cell in grouped.rows)]
    header += ["mean rank", "/".join(OUTCOMES)]
    body = []
    for arm in order:
        cells_ = [_mean_ci(by_value[arm]) if arm in by_value else "n/a" for by_value in grouped.rows.values()]
        tally = verdicts.tally(arm)
        body.append(
            [text(arm), *cells_, f"{mean_rank(ranked[arm]):.2f}", "/".join(str(tally[o]) for o in OUTCOMES)]
        )
    optimistic = (
        f" Chosen on the test set over the grid: {OPTIMISTIC}."
        if gridded(study.cfg) and grid_rule(study.cfg) == "test"
        else ""
    )
    note = (
        f"Each task's `{METRIC}`: mean over seeds [95% bootstrap interval], * when a run of it was still "
        "improving at the end of its budget (Convergence, below); rank 1 is best in a task, a description, "
        f"not a verdict. {'/'.join(OUTCOMES)} counts the arm's verdicts against every other arm over all "
        "tasks, as the Statistics section gives each (the candidate's family, and the classic arms' "
        "context): W won, T no significant difference, L lost, NC not converged (no win, no loss), U "
        f"untestable at these seeds. The candidate, `{study.candidate.label}`, is highlighted.{optimistic}"
    )
    return Section("Ranking", [Table(header, body, right_from=1, id="ranking"), note])


def convergence_section(grouped: Cells, cap: int = 1) -> Section:
    """Mechanism x task: how many runs converged, or how many were still improving (results.json's
    `convergence`, `attnx.track.convergence`), after continuations up to `cap` budgets."""
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
    runs = [r for by_value in grouped.rows.values() for row in by_value.values() for r in row.runs]
    judged = [r["convergence"] for r in runs if isinstance(r.get("convergence"), dict)]
    tolerances = sorted({float(t) for v in judged if (t := v.get("tolerance")) is not None})
    note = (
        "A run converged when its validation metric reached the task's ceiling, or when the mean of the last "
        "quarter of its validations improved on the quarter before by less than the tolerance "
        f"({', '.join(f'{t:g}' for t in tolerances) or 'not recorded'}; `convergence.tolerance`) plus two "
        "standard errors of the validations' noise (the binomial error of a share of the validation "
        "examples, or the curve's own scatter where larger). A "
        f'difference with a side still improving is reported as "{not_converged(cap)}": it measures the '
        "budget, not the mechanism. A run without a verdict (too few validations, an older run) does not "
        "count as still improving; – : no run recorded one."
    )
    return Section("Convergence", [Table(header, body, right_from=1, id="convergence"), note])


def budget_section(study: CompareStudy, runs: list[dict[str, Any]]) -> Section:
    """Mechanism x task: the budget its runs used, a cost of its own: the mean multiple of the task's budget
    they trained for (`attnx.compare.budget`'s continuations), their mean epochs (or steps) and training
    seconds, and how many were still improving at the cap."""
    cap = int(study.cfg.get("budget_cap") or 1)
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        if run.get("status") == "completed":
            found.setdefault((run["labels"]["task"], run["labels"]["mechanism"]), []).append(run)
    tasks = [task for task in study.cfg.tasks if any(key[0] == task for key in found)]
    arms = list(dict.fromkeys(job.arm.label for job in study.jobs))
    body = [[text(arm), *(_used(found.get((task, arm)), cap) for task in tasks)] for arm in arms]
    continued = (
        ""
        if cap == 1
        else (
            f" A run still improving when its budget ended was continued from its checkpoint, a budget at a "
            f"time, up to {cap}× (`budget_cap`); at the cap it is {not_converged(cap)!r}."
        )
    )
    note = (
        "Each cell: the mean multiple of the task's budget its runs trained for (the largest, when they "
        "differ), their mean epochs (steps, for a budget in steps) and training seconds." + continued
    )
    return Section("Budget", [Table(["mechanism", *tasks], body, right_from=1, id="budget"), note])


def _used(runs: list[dict[str, Any]] | None, cap: int) -> str:
    if not runs:
        return "n/a"
    multiples = [int(run["labels"].get("budget") or 1) for run in runs]
    by_epochs = int(((runs[0].get("config") or {}).get("trainer") or {}).get("max_epochs") or -1) > 0
    count = fmean(float(run.get("epochs" if by_epochs else "steps") or 0) for run in runs)
    seconds = fmean(float(run.get("train_seconds") or 0) for run in runs)
    at_cap = sum(
        m == cap > 1 and (run.get("convergence") or {}).get("converged") is False
        for m, run in zip(multiples, runs)
    )
    mean = fmean(multiples)
    widest = f" (max {max(multiples)}×)" if len(set(multiples)) > 1 else ""
    unit = "epochs" if by_epochs else "steps"
    capped = f" · {at_cap} of {len(runs)} still improving at the cap" if at_cap else ""
    return f"{mean:.2g}×{widest} · {count:.3g} {unit} · {seconds:.3g} s{capped}"


def discrimination_section(study: CompareStudy, base: Study, grouped: Cells) -> Section:
    """Which suite tasks pass the discrimination rule (`attnx.compare.discrimination`), with the figures."""
    cfg = study.cfg
    verdicts = base.verdicts
    assert verdicts is not None
    classic = {m for m in cfg.mechanisms if m != study.candidate.label}
    attending = classic & study.attending
    body = []
    for found in discrimination(cfg, grouped, attending, verdicts, METRIC, declared(base.runs, METRIC)):
        top = "none settled" if found.top is None else f"{found.top[0]} {found.top[1]:.3f}"
        told = "; ".join(f"{v.a} − {v.b} {v.result.mean:+.3f} ({v.words})" for v in found.told_apart)
        verdict = "passes" if found.passes else "fails: " + "; ".join(found.failing())
        body.append([found.task, f"{found.ceiling:g}", f"{found.bar:.3f}", top, told or "none", verdict])
    rule = cfg.discrimination
    without = sorted(classic - attending)
    note = (
        "A task discriminates when (a) a classic mechanism that hosts attention "
        f"({', '.join(sorted(attending)) or 'none here'}), none of whose runs was still improving, "
        f"reaches at least {rule.ceiling_fraction:g} of the task's ceiling (its suite `ceiling:`, else its "
        "metric's declared one) and (b) some pair of those mechanisms is told apart: a win or a loss in the "
        f"Statistics section (context family, Holm within the task at α = {base.procedure.alpha:g}) with a "
        f"mean difference of at least {rule.spread:g} (`discrimination.ceiling_fraction`, "
        "`discrimination.spread`). "
        + (
            f"{', '.join(without)} host no attention (their context does not depend on the query) and never "
            "count. "
            if without
            else ""
        )
        + "A task that fails (a) is too hard for its budget; one that fails (b) cannot tell attention "
        "mechanisms apart there: it is context, not calibration."
    )
    header = ["task", "ceiling", "(a) needs", "(a) best settled", "(b) told apart", "verdict"]
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
    if not gridded(cfg):
        score = f"its `{METRIC}`"
    elif grid_rule(cfg) == "test":
        score = f"its best test score over the grid, {OPTIMISTIC}"
    else:
        score = "its test score at the grid point chosen on validation"
    note = (
        f"A capability's score is the mean over its settings of each setting's score ({score}), per seed; "
        f"mean ± standard deviation over seeds (MAD, Poli et al. 2024). n/a: the mechanism lacks a setting's "
        f"score (it cannot run there, or a run did not complete). Settings: {settings}."
    )
    return Section(
        "Capabilities", [Table(["mechanism", *names], body, right_from=1, id="capabilities"), note]
    )


def _mean_ci(row: Row) -> str:
    s = stats.summarize(row.found(METRIC))
    improving = "*" if convergence(row).improving else ""
    return f"{s.mean:.3f}{improving}" + (f" [{s.ci[0]:.3f}, {s.ci[1]:.3f}]" if s.ci else "")
