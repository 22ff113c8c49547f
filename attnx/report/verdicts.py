"""The one decision procedure behind every verdict `attnx report` and `attnx compare`'s report print: the
paired table, the win/tie/loss matrix, the ranking's W/T/L counts, verdicts.csv and every sentence.

Within a cell (one task setting: `attnx.report.significance.cells`), two values a, b of the compared key:

- **Test**: the per-seed differences a − b over the seeds both have, two-sided (`stats.paired`): the exact
  sign-flip test up to 16 seeds, Wilcoxon's signed-rank test above (said "approximate" where SciPy uses
  its normal approximation: zeros or ties among the differences).
- **Family**: the comparisons the user asked about, per cell. In a compare, the candidate against each
  other arm of a task (m = arms − 1); in a report with `--baseline KEY=V`, each row against its cell's
  baseline row; in a report without one, every pair of the key's values in the cell (m = k(k − 1)/2).
  The other pairs of a cell (the classic arms against each other; rows against each other beside a
  baseline) are **context**: tested the same way, Holm-adjusted as a family of their own, labelled
  "context", never mixed into the family's adjustment.
- **Adjustment**: Holm's step-down over the family, within each cell by default. A compare's tasks are
  separate questions (alignment, pooling, recall), answered and printed per task, and nothing pools them
  into one claim (the ranking's W/T/L is a tally of per-task verdicts): adjusting across tasks would spend
  seeds on a claim nobody makes (15 comparisons need 12 seeds for p < 0.01, 5 need 10). The price is said:
  over t tasks the chance of some false verdict is at most t·α. `span="all"` (`family=suite` in a compare,
  `--family all` in a report) adjusts over every cell at once instead.
- **α**: 0.05 unless given (`alpha=` in a compare, `--alpha` in a report).
- **Floor**: with m tested comparisons in the family and n paired seeds the smallest adjusted p is m·2/2ⁿ
  (`stats.smallest_p`): a pair whose floor is ≥ α is "untestable", whatever its data.
- **Words**, the first that applies (matrix code in brackets):
    no paired seeds                       (–)   no seed on both sides
    not converged: raise the budget       (NC)  a side has a run still improving (`significance.Convergence`;
                                                at the budget cap where runs were continued: `not_converged`)
    one seed: no test                     (U)
    untestable at n seeds (floor ≥ α)     (U)
    better / worse                        (W/L) adjusted p < α
    no difference                         (T)   every seed's difference is 0
    no significant difference             (T)
  A win or a loss exists only there; the same `Verdict` is read by every place that mentions the pair.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from attnx.report import stats
from attnx.report.runs import Row, sort_key
from attnx.report.significance import Cells, convergence, paired

SPANS = ("cell", "all")  # where Holm's family ends: each cell (a task), or every cell of the report
FAMILY, CONTEXT = "family", "context"
OUTCOMES = ("W", "T", "L", "NC", "U")  # what the ranking tallies, in its order
NOT_CONVERGED = "not converged: raise the budget"


def not_converged(cap: int = 1) -> str:
    """NC's words: a side still improving at the end of its budget; where runs still improving were
    continued up to `cap` budgets (`attnx compare`'s budget_cap), at the cap."""
    return NOT_CONVERGED if cap <= 1 else f"not converged at the budget cap ({cap}× the task's budget)"


@dataclass(frozen=True)
class Procedure:
    """The procedure's two choices: the level `alpha`, and where Holm's family ends (`span`, one of
    SPANS). ValueError, one line, for either out of range. `cap`: the budgets a run still improving was
    continued to before its verdict (1: none), which only changes how NC is said."""

    alpha: float = stats.ALPHA
    span: str = "cell"
    cap: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.alpha < 1:  # `not`: nan too
            raise ValueError(f"alpha={self.alpha}: must be in (0, 1), e.g. 0.05")
        if self.span not in SPANS:
            raise ValueError(f"family={self.span}: must be one of {', '.join(SPANS)}")


@dataclass(frozen=True)
class Verdict:
    """a against b in one cell, on one metric, as the procedure decides it (module doc)."""

    cell: tuple[Any, ...]
    a: Any
    b: Any
    family: str  # FAMILY or CONTEXT
    m: int  # tested comparisons in its family (Holm's m)
    result: stats.Paired  # a − b
    p_adjusted: float | None
    settled: bool  # neither side has a run still improving
    higher: bool  # higher is better for the metric
    alpha: float
    cap: int = 1  # Procedure.cap

    @property
    def floor(self) -> float | None:
        """The smallest adjusted p at this n and m: m·2/2ⁿ; None without a test."""
        return stats.smallest_p(self.result.n, self.m) if self.result.n > 1 else None

    @property
    def outcome(self) -> str:
        """W, L, T, NC, U or – (module doc)."""
        r = self.result
        if r.n == 0:
            return "–"
        if not self.settled:
            return "NC"
        if r.p is None or (self.floor is not None and self.floor >= self.alpha):
            return "U"
        if self.p_adjusted is not None and self.p_adjusted < self.alpha:
            return "W" if (r.mean > 0) == self.higher else "L"
        return "T"

    @property
    def words(self) -> str:
        r, outcome = self.result, self.outcome
        if outcome == "–":
            return "no paired seeds"
        if outcome == "NC":
            return not_converged(self.cap)
        if outcome == "U":
            if r.p is None:
                return "one seed: no test"
            return f"untestable at {r.n} seeds (floor {p_text(self.floor)} ≥ α = {self.alpha:g})"
        if outcome in ("W", "L"):
            return "better" if outcome == "W" else "worse"
        return "no difference" if r.zero else "no significant difference"

    def flipped(self) -> Verdict:
        """b against a: the same decision, seen from the other side."""
        r = self.result
        result = replace(
            r,
            mean=-r.mean,
            ci=None if r.ci is None else (-r.ci[1], -r.ci[0]),
            d_z=None if r.d_z is None else -r.d_z,
            d_z_ci=None if r.d_z_ci is None else (-r.d_z_ci[1], -r.d_z_ci[0]),
        )
        return replace(self, a=self.b, b=self.a, result=result)


@dataclass(frozen=True)
class Verdicts:
    """Every pair of every cell, each once (`pairs`, oriented for the tables: the family's first), and
    each ordered pair's verdict (`of`)."""

    pairs: list[Verdict]
    procedure: Procedure

    def of(self, cell: tuple[Any, ...], a: Any, b: Any) -> Verdict:
        """a against b in `cell`; KeyError for a pair the cell does not have."""
        found = self._index.get((_key(cell), sort_key(a), sort_key(b)))
        if found is not None:
            return found
        return self._index[(_key(cell), sort_key(b), sort_key(a))].flipped()

    @functools.cached_property
    def _index(self) -> dict[tuple[Any, ...], Verdict]:
        return {(_key(v.cell), sort_key(v.a), sort_key(v.b)): v for v in self.pairs}

    def tally(self, value: Any) -> Counter[str]:
        """How `value` fared against every other value over the cells: W, T, L, NC, U counts."""
        found: Counter[str] = Counter()
        for v in self.pairs:
            if value in (v.a, v.b):
                found[(v if v.a == value else v.flipped()).outcome] += 1
        return found

    def family_sizes(self) -> list[tuple[tuple[Any, ...] | None, str, int, int]]:
        """(cell, or None when the family spans every cell; family; m; fewest paired seeds) of each
        family and context, for what the seed counts allow (`stats.smallest_p`)."""
        found: dict[tuple[Any, str], tuple[int, int]] = {}
        for v in self.pairs:
            if v.result.n > 1:
                key = (v.cell if self.procedure.span == "cell" else None, v.family)
                m, n = found.get(key, (v.m, v.result.n))
                found[key] = (m, min(n, v.result.n))
        return [(cell, family, m, n) for (cell, family), (m, n) in found.items()]


def decide(
    grouped: Cells,
    metric: str,
    higher: bool,
    procedure: Procedure,
    focus: Mapping[tuple[Any, ...], Any] | None = None,
    focus_first: bool = False,
    reference: Mapping[tuple[Any, ...], Any] | None = None,
) -> Verdicts:
    """Every pair of each cell of `grouped` on `metric` (`higher` is better), by the module doc's
    procedure. The family of a cell is its `focus` value (a compare's candidate, a report's baseline)
    against each other value, shown `focus − other` when `focus_first` else `other − focus`; a cell
    `focus` does not name has every pair in its family, and one whose focus has no row only context. A
    context pair is shown `other − reference` where the cell's `reference` (a compare task's baseline) is
    in it, else in the order of the key's values."""
    order = {sort_key(v): i for i, v in enumerate(grouped.values())}
    planned: list[tuple[tuple[Any, ...], Any, Any, str, Row, Row]] = []
    for cell, by_value in grouped.rows.items():
        centred = cell in (focus or {})  # a cell without its focus row (it failed) has only context
        centre = (focus or {}).get(cell)
        values = sorted(by_value, key=lambda v: order[sort_key(v)])
        here: list[tuple[tuple[Any, ...], Any, Any, str, Row, Row]] = []
        for i, x in enumerate(values):
            for y in values[i + 1 :]:
                if not centred or centre in (x, y):
                    family, (a, b) = FAMILY, _oriented(x, y, centre, focus_first)
                else:
                    family, (a, b) = CONTEXT, _oriented(x, y, (reference or {}).get(cell), False)
                here.append((cell, a, b, family, by_value[a], by_value[b]))
        planned += sorted(here, key=lambda pair: pair[3] == CONTEXT)  # the family's pairs first
    results = [paired(row_a, row_b, metric, procedure.alpha) for *_, row_a, row_b in planned]
    adjusted: list[float | None] = [None] * len(planned)
    sizes: list[int] = [0] * len(planned)
    groups: dict[tuple[Any, str], list[int]] = {}
    for i, (cell, _, _, family, _, _) in enumerate(planned):
        groups.setdefault((cell if procedure.span == "cell" else None, family), []).append(i)
    for members in groups.values():
        found = stats.holm([results[i].p for i in members])
        tested = sum(results[i].p is not None for i in members)
        for i, p in zip(members, found):
            adjusted[i], sizes[i] = p, tested
    return Verdicts(
        [
            Verdict(
                cell,
                a,
                b,
                family,
                m,
                result,
                p,
                _settled(row_a, row_b),
                higher,
                procedure.alpha,
                procedure.cap,
            )
            for (cell, a, b, family, row_a, row_b), result, p, m in zip(planned, results, adjusted, sizes)
        ],
        procedure,
    )


def _oriented(x: Any, y: Any, centre: Any, centre_first: bool) -> tuple[Any, Any]:
    """(x, y) as a table shows the pair: the centre first or last when it is one of them, else as given."""
    if centre == x:
        return (x, y) if centre_first else (y, x)
    if centre == y:
        return (y, x) if centre_first else (x, y)
    return x, y


def _key(cell: tuple[Any, ...]) -> tuple[Any, ...]:
    """A cell's values made hashable (a list among them, say)."""
    return tuple(map(sort_key, cell))


def _settled(*rows: Row) -> bool:
    return all(convergence(row).settled for row in rows)


def p_text(p: float | None) -> str:
    """A p-value as every table prints it: three decimals, two significant digits below 0.01 (a floor of
    0.0098 is not "0.010")."""
    return "–" if p is None else f"{p:.3f}" if p >= 0.01 else f"{p:.2g}"
