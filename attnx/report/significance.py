"""What a report compares, and the figures the verdicts are made of: cells, the paired differences, each
configuration's convergence, and ranks. The verdicts themselves are `attnx.report.verdicts`' alone.

Rows are compared within a **cell**: the rows that agree on every column except the compared key (say
`attention`), that key's own fields (`attention.window`), the columns that follow from it (a
mechanism's default score) and the keys tuned per row (`--select optim.lr`, or a width `attnx compare`
matched), so that a cell is one task setting and its rows are the key's values. Runs with the same
seed are paired: the same data order and initial embeddings (`paired`).

- `convergence(row)`: a configuration's runs by their recorded verdict (results.json's `convergence`,
  `attnx.track.convergence`): converged, still improving, or without a verdict (fewer validations than
  `convergence.min_validations`, or a record from before curves were kept). The one definition every
  verdict and the discrimination rule use: a configuration is **settled** unless one of its runs was
  still improving at the end of its budget. A run without a verdict does not unsettle it (nothing says it
  was still improving), and every table that shows convergence says how many runs had none.
- `ranks`: per cell the key's values ranked by mean (1 = best, ties share the mean rank), and the mean
  rank over cells: a description, not a verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scipy.stats import rankdata

from attnx.report import stats
from attnx.report.runs import Row, sort_key, text


@dataclass(frozen=True)
class Convergence:
    """A configuration's runs by their recorded verdict: converged, still improving, of how many (the
    rest had none)."""

    converged: int
    improving: int
    runs: int

    @property
    def unjudged(self) -> int:
        return self.runs - self.converged - self.improving

    @property
    def settled(self) -> bool:
        """No run still improving at the end of its budget (module doc)."""
        return not self.improving

    def __str__(self) -> str:
        if self.improving:
            return f"still improving ({self.improving} of {self.runs})"
        if not self.converged:
            return "–"
        return f"converged {self.converged}/{self.runs}" + (
            f" ({self.unjudged} without a verdict)" if self.unjudged else ""
        )


def convergence(row: Row) -> Convergence:
    """How many of `row`'s runs converged and how many were still improving (module doc)."""
    verdicts = [(run.get("convergence") or {}).get("converged") for run in row.runs]
    return Convergence(verdicts.count(True), verdicts.count(False), len(verdicts))


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


def paired(row: Row, baseline: Row, metric: str, alpha: float = stats.ALPHA) -> stats.Paired:
    """`row` − `baseline` on the seeds both have."""
    mine, theirs = row.by_seed(metric), baseline.by_seed(metric)
    seeds = sorted((s for s in mine if s in theirs), key=sort_key)
    return stats.paired([mine[s] for s in seeds], [theirs[s] for s in seeds], alpha)


def ranks(grouped: Cells, metric: str, higher: bool) -> dict[Any, dict[tuple[Any, ...], float]]:
    """value -> cell -> rank of its mean in that cell (1 = best, `higher` or lower being better); cells
    where it has no mean are absent."""
    ranked: dict[Any, dict[tuple[Any, ...], float]] = {}
    for cell, by_value in grouped.rows.items():
        scored = [(v, m) for v, row in by_value.items() if (m := row.mean(metric)) is not None]
        if not scored:
            continue
        order = rankdata([-m if higher else m for _, m in scored])  # ties get their mean rank
        for (v, _), rank in zip(scored, order):
            ranked.setdefault(v, {})[cell] = float(rank)
    return ranked


def mean_rank(by_cell: dict[tuple[Any, ...], float]) -> float:
    return sum(by_cell.values()) / len(by_cell)
