"""What the plugin tests share: `attnx plugins`'s tables, the shipped position plugins, registries that
forget what a test registers (`isolated_registries`, a fixture), and the recipes of docs/recipes/."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from attnx.plugins import describe
from attnx.registry import KINDS, load_all, registry

from helpers.paths import REPO

RECIPES = REPO / "docs" / "recipes"
_imports = itertools.count()

NAMES = ("alibi", "t5_bias", "rope")


def listing() -> dict[str, tuple[list[str], dict[str, list[str]]]]:
    """`attnx plugins`'s tables: kind -> (header, name -> cells)."""
    tables = {}
    for block in describe().split("\n\n"):
        title, header, _, *rows = block.splitlines()
        cells = [[c.strip() for c in line.split("|")[1:-1]] for line in (header, *rows)]
        tables[title.split()[0]] = (cells[0], {row[0].split()[0]: row for row in cells[1:]})
    return tables


@pytest.fixture
def isolated_registries(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Registrations made inside a test vanish after it: every registry's tables are copies. Everything
    discoverable is loaded first, so nothing that registers during the test is lost to later ones."""
    load_all()
    for kind in KINDS:
        for table in ("_entries", "_aliases", "_renamed"):
            monkeypatch.setattr(registry(kind), table, dict(getattr(registry(kind), table)))
    yield


def imported(path: Path) -> ModuleType:
    """A plugin file imported afresh, under a module name of its own: its classes register again (into the
    registries `isolated_registries` copied), where `attnx.registry.load_file` imports a path once."""
    spec = importlib.util.spec_from_file_location(f"imported_{path.stem}_{next(_imports)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import does: inspect finds the class's source through it
    spec.loader.exec_module(module)
    return module
