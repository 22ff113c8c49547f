"""What the plugin tests share: `attnx plugins`'s tables, the shipped position plugins."""

from __future__ import annotations

from attnx.plugins import describe

NAMES = ("alibi", "t5_bias", "rope")


def listing() -> dict[str, tuple[list[str], dict[str, list[str]]]]:
    """`attnx plugins`'s tables: kind -> (header, name -> cells)."""
    tables = {}
    for block in describe().split("\n\n"):
        title, header, _, *rows = block.splitlines()
        cells = [[c.strip() for c in line.split("|")[1:-1]] for line in (header, *rows)]
        tables[title.split()[0]] = (cells[0], {row[0].split()[0]: row for row in cells[1:]})
    return tables
