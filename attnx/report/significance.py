"""Which configurations differ, and by how much: the statistics `attnx report` adds to its table.

Rows are compared within a **cell**: the rows that agree on every column except the compared key (say
`attention`), that key's own fields (`attention.window`), the columns that follow from it (a
mechanism's default score) and the keys tuned per row (`--select optim.lr`, or a width `attnx compare`
matched), so that a cell is one task setting and its rows are the key's values. Runs with the same
seed are paired: the same data order and initial embeddings.

- `against_baseline`: each row against the cell's baseline row (`--baseline attention=additive`),
  paired over seeds (`attnx.report.stats.paired`), p-values Holm-adjusted over all the comparisons made.
- `win_matrix`: per cell, each ordered pair of the key's values: W when the 95% bootstrap interval of
  the paired difference lies wholly on the better side of 0, L when wholly on the worse side, T
  otherwise (with one seed there is no interval: by the sign of the difference).
- `ranks`: per cell the key's values ranked by mean (1 = best, ties share the mean rank), and the mean
  rank over cells.
"""

from __future__ import annotations

from collections.abc import Sequence
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

    def verdict(self, alpha: float = stats.ALPHA) -> str:
        r = self.result
        if r.p is None:
            return "one seed: no test"
        if stats.smallest_p(r.n) >= alpha and r.test == "sign-flip":
            return f"untestable at {r.n} seeds (p ≥ {stats.smallest_p(r.n):.3f})"
        if self.p_holm is not None and self.p_holm < alpha:
            return "better" if (r.mean < 0) == self.lower else "worse"
        return "no significant difference"


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


def against_baseline(grouped: Cells, baseline: Any, metric: str) -> list[Comparison]:
    """Every row of a cell that has a `baseline` row against it, Holm-adjusted together."""
    found = []
    for cell, by_value in grouped.rows.items():
        base = by_value.get(baseline)
        if base is None:
            continue
        for value, row in by_value.items():
            if value != baseline:
                found.append((cell, value, paired(row, base, metric)))
    adjusted = stats.holm([result.p for _, _, result in found])
    lower = lower_is_better(metric)
    return [Comparison(cell, value, result, p, lower) for (cell, value, result), p in zip(found, adjusted)]


def win_matrix(grouped: Cells, metric: str) -> dict[tuple[Any, ...], dict[tuple[Any, Any], str]]:
    """Per cell, (a, b) -> "W" | "T" | "L": a against b on `metric`, by the rule in the module doc."""
    lower = lower_is_better(metric)
    matrix = {}
    for cell, by_value in grouped.rows.items():
        outcomes = {}
        for a, row_a in by_value.items():
            for b, row_b in by_value.items():
                if a != b:
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
