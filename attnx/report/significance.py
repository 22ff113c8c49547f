"""Which configurations differ, and by how much: the statistics `attnx report` adds to its table.

Rows are compared within a **cell**: the rows that agree on every column except the compared key (say
`attention`), that key's own fields (`attention.window`), the columns that follow from it (a
mechanism's default score) and the keys tuned per row (`--select optim.lr`, or a width `attnx compare`
matched), so that a cell is one task setting and its rows are the key's values. Runs with the same
seed are paired: the same data order and initial embeddings.

- `against_baseline`: each row against the cell's baseline row (`--baseline attention=additive`),
  paired over seeds (`attnx.report.stats.paired`: the mean difference, d_z and the smallest detectable
  difference, each with what it needs), p-values Holm-adjusted within the cell. Holm's family is one cell
  because each task setting is its own question: a family of every comparison in a report would make
  eight seeds and twenty comparisons unable to reach significance anywhere (the exact test's floor at 8
  seeds, 2/2^8 = 0.0078, times 20 is 0.16).
- `win_matrix`: per cell, each ordered pair of the key's values: W when the 95% bootstrap interval of
  the paired difference lies wholly on the better side of 0, L when wholly on the worse side, T
  otherwise (with one seed there is no interval: by the sign of the difference).
- Convergence (results.json's `convergence`, `attnx.track.convergence`): a row whose runs include one
  still improving (`converged: false`) is `convergence(row)`'s "still improving (k of n)"; a comparison or
  a pairing with such a row on either side is no win and no loss ("not converged: raise the budget",
  NC in the matrix): the difference says how far each side got within the budget, not which is better.
  Runs without a verdict (older records, too few validations) count as before.
- `ranks`: per cell the key's values ranked by mean (1 = best, ties share the mean rank), and the mean
  rank over cells.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy.stats import rankdata

from attnx.report import stats
from attnx.report.runs import Row, lower_is_better, sort_key, text


@dataclass(frozen=True)
class Comparison:
    """A row against its cell's baseline row on one metric."""

    cell: tuple[Any, ...]
    value: Any  # the row's value of the compared key
    result: stats.Paired
    p_holm: float | None
    lower: bool  # lower is better for the metric
    converged: bool = True  # False: either side has a run still improving at the end of its budget

    def verdict(self, alpha: float = stats.ALPHA) -> str:
        r = self.result
        if not self.converged:
            return NOT_CONVERGED
        if r.p is None:
            return "one seed: no test"
        if stats.smallest_p(r.n) >= alpha and r.test == "sign-flip":
            return f"untestable at {r.n} seeds (p ≥ {stats.smallest_p(r.n):.3f})"
        if self.p_holm is not None and self.p_holm < alpha:
            return "better" if (r.mean < 0) == self.lower else "worse"
        return "no significant difference"


NOT_CONVERGED = "not converged: raise the budget"


@dataclass(frozen=True)
class Convergence:
    """A configuration's runs by their recorded verdict: converged, still improving, of how many."""

    converged: int
    improving: int
    runs: int

    def __str__(self) -> str:
        if self.improving:
            return f"still improving ({self.improving} of {self.runs})"
        return f"converged {self.converged}/{self.runs}" if self.converged else "–"


def convergence(row: Row) -> Convergence:
    """How many of `row`'s runs converged and how many were still improving (module doc)."""
    verdicts = [(run.get("convergence") or {}).get("converged") for run in row.runs]
    return Convergence(verdicts.count(True), verdicts.count(False), len(verdicts))


def _converged(*rows: Row) -> bool:
    return not any(convergence(row).improving for row in rows)


@dataclass(frozen=True)
class Cells:
    """Rows grouped into cells: `columns` name the cell's values, `key` the compared key."""

    columns: list[str]
    key: str
    rows: dict[tuple[Any, ...], dict[Any, Row]]  # cell -> key's value -> row

    def label(self, cell: tuple[Any, ...]) -> str:
        return ", ".join(f"{c}={text(v)}" for c, v in zip(self.columns, cell)) or "all runs"

    def values(self) -> list[Any]:
        """The key's values in the order of the table."""
        found = {sort_key(v): v for by_value in self.rows.values() for v in by_value}
        return [found[k] for k in sorted(found)]


def cells(rows: Sequence[Row], columns: Sequence[str], key: str, tuned: Sequence[str] = ()) -> Cells:
    """Group `rows` (whose values follow `columns`) by the columns that say where a row stands, not
    which `key` it is: `key` itself, its fields, `tuned`, and any column whose value follows from the
    key's (a mechanism's default score) are left out. Two rows of one cell with the same value of `key`
    cannot both be compared: the first is kept."""
    k = list(columns).index(key)

    def follows(i: int) -> bool:
        seen: dict[Any, Any] = {}
        return all(
            seen.setdefault(sort_key(r.values[k]), sort_key(r.values[i])) == sort_key(r.values[i])
            for r in rows
        )

    own = [
        i
        for i, c in enumerate(columns)
        if c != key and not c.startswith(key + ".") and c not in tuned and not follows(i)
    ]
    grouped: dict[tuple[Any, ...], dict[Any, Row]] = {}
    for row in rows:
        cell = tuple(row.values[i] for i in own)
        grouped.setdefault(cell, {}).setdefault(row.values[k], row)
    return Cells([columns[i] for i in own], key, grouped)  # cells in the rows' order


def paired(row: Row, baseline: Row, metric: str) -> stats.Paired:
    """`row` − `baseline` on the seeds both have."""
    mine, theirs = row.by_seed(metric), baseline.by_seed(metric)
    seeds = sorted((s for s in mine if s in theirs), key=sort_key)
    return stats.paired([mine[s] for s in seeds], [theirs[s] for s in seeds])


def against_baseline(
    grouped: Cells, baseline: Any, metric: str, own: Mapping[tuple[Any, ...], Any] | None = None
) -> list[Comparison]:
    """Every row of a cell that has a baseline row against it, Holm-adjusted within the cell. The
    baseline is `baseline`, or a cell's `own` (a compare suite task's)."""
    lower = lower_is_better(metric)
    found = []
    for cell, by_value in grouped.rows.items():
        baseline_here = (own or {}).get(cell, baseline)
        base = by_value.get(baseline_here)
        if base is None:
            continue
        rows = [(value, row) for value, row in by_value.items() if value != baseline_here]
        results = [paired(row, base, metric) for _, row in rows]
        adjusted = stats.holm([result.p for result in results])
        found += [
            Comparison(cell, value, result, p, lower, _converged(row, base))
            for (value, row), result, p in zip(rows, results, adjusted)
        ]
    return found


def win_matrix(grouped: Cells, metric: str) -> dict[tuple[Any, ...], dict[tuple[Any, Any], str]]:
    """Per cell, (a, b) -> "W" | "T" | "L" (or "NC", not converged): a against b on `metric`, by the
    rules in the module doc."""
    lower = lower_is_better(metric)
    matrix = {}
    for cell, by_value in grouped.rows.items():
        outcomes = {}
        for a, row_a in by_value.items():
            for b, row_b in by_value.items():
                if a != b and not _converged(row_a, row_b):
                    outcomes[(a, b)] = "NC"
                elif a != b:
                    outcomes[(a, b)] = _outcome(paired(row_a, row_b, metric), lower)
        matrix[cell] = outcomes
    return matrix


def _outcome(result: stats.Paired, lower: bool) -> str:
    if result.n == 0:
        return "–"
    low, high = result.ci if result.ci is not None else (result.mean, result.mean)
    better, worse = (high < 0, low > 0) if lower else (low > 0, high < 0)
    return "W" if better else "L" if worse else "T"


def ranks(grouped: Cells, metric: str) -> dict[Any, dict[tuple[Any, ...], float]]:
    """value -> cell -> rank of its mean in that cell (1 = best); cells where it has no mean are absent."""
    lower = lower_is_better(metric)
    ranked: dict[Any, dict[tuple[Any, ...], float]] = {}
    for cell, by_value in grouped.rows.items():
        scored = [(v, m) for v, row in by_value.items() if (m := row.mean(metric)) is not None]
        if not scored:
            continue
        order = rankdata([m if lower else -m for _, m in scored])  # ties get their mean rank
        for (v, _), rank in zip(scored, order):
            ranked.setdefault(v, {})[cell] = float(rank)
    return ranked


def mean_rank(by_cell: dict[tuple[Any, ...], float]) -> float:
    return sum(by_cell.values()) / len(by_cell)
