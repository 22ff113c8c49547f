"""The Statistics section of an `attnx report`: what the seed counts allow after the adjustment
(`power_note`), every pair of each cell seed by seed with its verdict (`pairs_table`), the win/tie/loss matrix
of the same verdicts, and the ranks in each cell. Every verdict is the study's (`Study.verdicts`,
`attnx.report.verdicts`); the figures are `attnx.report.stats`'."""

from __future__ import annotations

from attnx.report import stats
from attnx.report.document import Section, Table, slug
from attnx.report.runs import text
from attnx.report.significance import Cells, mean_rank, ranks
from attnx.report.study import Study
from attnx.report.verdicts import CONTEXT, FAMILY, Verdict, Verdicts, p_text

STRICT_ALPHA = 0.01  # the level a verdict should be able to reach: the seed counts are judged against it too
LEGEND = (
    "W: better, L: worse (adjusted p < α); T: no significant difference (or none at all); NC: not "
    "converged, a side still improving at the end of its budget: raise the budget; U: untestable, the "
    "smallest adjusted p at this number of seeds is ≥ α (or one seed); –: no paired seeds."
)


def statistics_section(study: Study, grouped: Cells) -> Section:
    verdicts = study.verdicts
    assert verdicts is not None  # a study with cells has verdicts
    metric, key = study.metrics[0], grouped.key
    parts: list[str | Table] = [power_note(verdicts), family_note(study, grouped)]
    parts.append(pairs_table(grouped, verdicts))
    parts.append(
        f"Δ is the mean per-seed difference on {metric} (the pair's first − second) with its 95% bootstrap "
        "interval; d_z = mean / sd of the differences, with its bootstrap interval (words where it has none: "
        "equal differences give no d_z, n ≤ 3 no interval); MDE the smallest difference a t-test detects at "
        f"this n with power {stats.POWER:g} at α; test: the exact sign-flip test over seeds up to "
        f"{stats.EXACT_MAX}, Wilcoxon's signed-rank test above (approximate where the differences have zeros "
        "or ties); p two-sided; m the comparisons in the pair's family; floor = m·2/2ⁿ, the smallest "
        "adjusted p possible at this n; p (Holm) the adjusted p. The verdict is the procedure's (README, "
        "Statistics): the same one the matrix, the ranking and verdicts.csv show."
    )
    parts.append(
        f"**Wins, ties and losses** of each `{key}` (row) against each other (column) on {metric}, the "
        f"verdicts above: {LEGEND}"
    )
    parts += matrix_tables(grouped, verdicts)
    parts.append(
        f"**Ranks** by mean {metric} in each cell (1 = best; ties share their mean rank): a description, "
        "not a verdict."
    )
    parts.append(rank_table(grouped, metric, study.higher(metric)))
    return Section("Statistics", parts)


def family_note(study: Study, grouped: Cells) -> str:
    """Which comparisons form the family, and where Holm's adjustment ends."""
    key = grouped.key
    if study.candidate is not None:
        family = f"the candidate `{key}={text(study.candidate)}` against each other `{key}`"
    elif study.baseline is not None:
        own = "".join(f"; {grouped.label(c)}: `{key}={text(v)}`" for c, v in study.baselines.items())
        family = f"each `{key}` against its cell's baseline, `{key}={text(study.baseline)}`{own}"
    else:
        family = f"every pair of `{key}` values"
    span = "within each cell" if study.procedure.span == "cell" else "over every cell at once"
    context = (
        "; the other pairs are context, tested the same way and adjusted as a family of their own"
        if study.candidate is not None or study.baseline is not None
        else ""
    )
    return f"**Every pair, seed by seed.** The family is {family}, Holm-adjusted {span}{context}."


def power_note(verdicts: Verdicts) -> str:
    """What the seed counts allow after the adjustment: per family size and seed count, the floor m·2/2ⁿ
    against α (and against 0.01), with the seeds it would take where it is out of reach."""
    alpha = verdicts.procedure.alpha
    sizes = verdicts.family_sizes()
    if not sizes:
        return "One seed per configuration: no interval and no test is possible (run `seed=0,1,2`)."
    lines = []
    for family, label in ((FAMILY, "the family"), (CONTEXT, "context")):
        found = sorted({(m, n) for _, kind, m, n in sizes if kind == family})
        for m, n in found:
            floor = stats.smallest_p(n, m)
            if floor >= alpha:
                verdict = (
                    f"≥ α = {alpha:g}: untestable, whatever the data; p < α needs "
                    f"{stats.seeds_for(alpha, m)} seeds"
                )
            elif floor >= STRICT_ALPHA:
                verdict = (
                    f"< α = {alpha:g}; p < {STRICT_ALPHA:g} needs {stats.seeds_for(STRICT_ALPHA, m)} seeds"
                )
            else:
                verdict = f"< α = {alpha:g} and < {STRICT_ALPHA:g}"
            lines.append(
                f"{label}, m = {m} comparison{'s' if m > 1 else ''} at n = {n} seeds: the smallest adjusted "
                f"p is {m}·2/2^{n} = {p_text(floor)} ({verdict})"
            )
    return "**What the seeds allow** (α = " + f"{alpha:g}): " + "; ".join(lines) + "."


def pairs_table(grouped: Cells, verdicts: Verdicts) -> Table:
    header = ["cell", "pair", "family", "n", "Δ", "95% CI", "d_z", "d_z 95% CI", "MDE", "test", "p", "m"]
    header += ["floor", "p (Holm)", "verdict"]
    body = [pair_row(grouped, v) for v in verdicts.pairs]
    return Table(header, body, right_from=3, id="pairs")


def pair_row(grouped: Cells, v: Verdict) -> list[str]:
    r = v.result
    tested = r.n > 1
    return [
        grouped.label(v.cell),
        f"{text(v.a)} − {text(v.b)}",
        v.family,
        str(r.n),
        "–" if r.n == 0 else f"{r.mean:+.3f}",
        interval(r.ci, ".3f"),
        d_z_text(r),
        interval(r.d_z_ci, ".2f") if r.d_z_ci else ("–" if r.d_z is None else r.d_z_note),
        "–" if r.mde is None else f"{r.mde:.3f}",
        r.test,
        p_text(r.p),
        str(v.m) if tested else "–",
        p_text(v.floor),
        p_text(v.p_adjusted),
        v.words,
    ]


def interval(ci: tuple[float, float] | None, spec: str) -> str:
    return "–" if ci is None else f"[{ci[0]:+{spec}}, {ci[1]:+{spec}}]"


def d_z_text(r: stats.Paired) -> str:
    if r.d_z is not None:
        return f"{r.d_z:+.2f}"
    return r.d_z_note if r.n > 1 else "–"


def matrix_tables(grouped: Cells, verdicts: Verdicts) -> list[str | Table]:
    values = grouped.values()
    found: list[str | Table] = []
    for cell, by_value in grouped.rows.items():
        present = [v for v in values if v in by_value]
        body = [
            [text(a), *("·" if a == b else verdicts.of(cell, a, b).outcome for b in present)] for a in present
        ]
        table = Table(
            [grouped.key, *map(text, present)], body, right_from=1, id=f"matrix-{slug(grouped.label(cell))}"
        )
        found += [f"*{grouped.label(cell)}*", table]
    return found


def rank_table(grouped: Cells, metric: str, higher: bool) -> Table:
    ranked = ranks(grouped, metric, higher)
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
