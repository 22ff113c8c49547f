"""The Statistics section of an `attnx report`: what the seed counts allow (`n_note`), each configuration
paired seed by seed against the compared key's baseline, the win/tie/loss matrix of every pair, and the
ranks in each cell; the numbers are `attnx.report.significance`'s and `attnx.report.stats`'s."""

from __future__ import annotations

from attnx.report import stats
from attnx.report.document import Section, Table
from attnx.report.runs import text
from attnx.report.significance import Cells, against_baseline, mean_rank, ranks, win_matrix
from attnx.report.study import Study


def statistics_section(study: Study, grouped: Cells) -> Section:
    metric, key = study.metrics[0], grouped.key
    seeds = sorted({len(row.by_seed(metric)) for row in study.rows})
    parts: list[str | Table] = [n_note(seeds)]
    if study.baseline is not None:
        own = "".join(f"; {grouped.label(c)}: `{key}={text(v)}`" for c, v in study.baselines.items())
        parts.append(f"**Paired against `{key}={text(study.baseline)}`**{own} on {metric}, seed by seed:")
        parts.append(baseline_table(study, grouped))
        parts.append(
            "Δ is the mean per-seed difference (row − baseline) with its 95% bootstrap interval; d_z = "
            "mean / sd of the differences, with its bootstrap interval; MDE the smallest difference a t-test "
            f"detects at this n with power {stats.POWER:g} (α = {stats.ALPHA:g}), and floor the smallest p "
            f"the exact test can give at this n (2/2ⁿ); p is two-sided, exact (sign-flip over seeds up to "
            f"{stats.EXACT_MAX}, Wilcoxon signed-rank above), and Holm's adjustment is within each cell: "
            "each cell is its own question. A row with a run still improving on either side is "
            '"not converged: raise the budget", never better or worse.'
        )
    parts.append(
        f"**Wins, ties and losses** of each `{key}` (row) against each other (column) on {metric}: W when "
        "the 95% bootstrap interval of the paired difference lies wholly on the better side of 0, L wholly "
        "on the worse side, T otherwise; NC when either side has a run still improving (no win, no loss)."
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
            f"{stats.seeds_for()} seeds are the fewest that can, {stats.seeds_for(0.01)} for p < 0.01."
        )
    needed = stats.seeds_for(0.01)
    more = f"; p < 0.01 needs {needed} seeds" if n < needed else ""
    return f"{counts} per configuration; the smallest attainable two-sided p is {floor:.4f}{more}."


def baseline_table(study: Study, grouped: Cells) -> Table:
    comparisons = against_baseline(grouped, study.baseline, study.metrics[0], study.baselines)
    body = []
    for c in comparisons:
        r = c.result
        ci = f"[{r.ci[0]:+.3f}, {r.ci[1]:+.3f}]" if r.ci else "–"
        d_z = "–" if r.d_z is None else f"{r.d_z:+.2f}"
        d_z_ci = f"[{r.d_z_ci[0]:+.2f}, {r.d_z_ci[1]:+.2f}]" if r.d_z_ci else "–"
        body.append(
            [
                grouped.label(c.cell),
                text(c.value),
                str(r.n),
                f"{r.mean:+.3f}",
                ci,
                d_z,
                d_z_ci,
                "–" if r.mde is None else f"{r.mde:.3f}",
                _p(stats.smallest_p(r.n)) if r.n > 1 else "–",
                r.test,
                _p(r.p),
                _p(c.p_holm),
                c.verdict(),
            ]
        )
    header = ["cell", grouped.key, "n", "Δ", "95% CI", "d_z", "d_z 95% CI", "MDE", "floor", "test", "p"]
    header += ["p (Holm)", "verdict"]
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


def _p(p: float | None) -> str:
    return "–" if p is None else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"
