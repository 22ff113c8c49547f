"""The package's modules and their layers (ARCHITECTURE.md's table): what tests/unit/test_architecture.py
checks statically and tests/e2e/install/test_architecture_cli.py at run time."""

from __future__ import annotations

from pathlib import Path

from helpers.paths import PACKAGE

# top-level package or module -> layer (ARCHITECTURE.md's table, one row per entry)
LAYERS = {
    "attnx": 0,  # the package itself: the plugin API's names, imported lazily
    "attnx.registry": 0,
    "attnx.vocab": 0,
    "attnx.table": 0,
    "attnx.nn": 1,
    "attnx.tasks": 1,
    "attnx.models": 2,
    "attnx.testing": 2,
    "attnx.contrib": 2,  # the shipped plugins: written against the public API, as a user's
    "attnx.config": 3,
    "attnx.lit": 3,
    "attnx.track": 3,
    "attnx.train": 4,
    "attnx.report": 4,
    "attnx.compare": 4,
    "attnx.bench": 4,
    "attnx.predict": 4,
    "attnx.generate": 4,
    "attnx.dashboard": 4,
    "attnx.sync": 4,
    "attnx.plugins": 4,
    "attnx.store": 4,
    "attnx.cli": 4,
}


def layer_of(module: str) -> tuple[int, str]:
    prefix = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[prefix], prefix


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found
