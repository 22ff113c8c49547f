"""Aligned Markdown tables: the one renderer behind `attnx report`, `attnx bench`, `attnx plugins` and
the benchmarks, padded so that a table reads as well in a terminal as rendered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def cell(value: Any, digits: int = 2) -> str:
    """A table cell: floats to `digits` decimals, None as an en dash."""
    if value is None:
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def markdown_table(
    header: Sequence[str], rows: Sequence[Sequence[Any]], right_from: int | None = None
) -> str:
    """`rows` under `header`, columns padded to one width; from column `right_from` on, cells are
    right-aligned (numbers, with `---:` rules), before it left-aligned."""
    cells = [[cell(v) for v in row] for row in [header, *rows]]
    widths = [max(3, *(len(row[i]) for row in cells)) for i in range(len(header))]

    def right(i: int) -> bool:
        return right_from is not None and i >= right_from

    def line(row: list[str]) -> str:
        return (
            "| "
            + " | ".join(c.rjust(w) if right(i) else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
            + " |"
        )

    rule = ["-" * (w - 1) + ":" if right(i) else "-" * w for i, w in enumerate(widths)]
    return "\n".join([line(cells[0]), "| " + " | ".join(rule) + " |", *(line(row) for row in cells[1:])])
