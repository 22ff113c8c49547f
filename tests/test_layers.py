"""The package's layers import one way: foundation <- nn, tasks <- models <- lit, track <- commands.

Checked twice: statically, every `import attnx...` in a module's source (function-level imports
included) names its own layer or a lower one; and at run time, importing every module of the two
bottom layers in a fresh interpreter loads nothing from a higher one.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "attnx"
# module prefix -> layer; the longest matching prefix decides
LAYERS = {
    "attnx": 0,
    "attnx.registry": 0,
    "attnx.schema": 0,
    "attnx.vocab": 0,
    "attnx.table": 0,
    "attnx.stats": 0,
    "attnx.document": 0,
    "attnx.nn": 1,
    "attnx.tasks": 1,
    "attnx.measure": 1,
    "attnx.models": 2,
    "attnx.contrib": 2,  # the shipped plugins: written against the public API, as a user's
    "attnx.testing": 2,
    "attnx.lit": 3,
    "attnx.track": 3,
    "attnx.config": 4,
    "attnx.checks": 4,
    "attnx.preflight": 4,
    "attnx.train": 4,
    "attnx.distributed": 4,
    "attnx.predict": 4,
    "attnx.report": 4,
    "attnx.runs": 4,
    "attnx.report_sections": 4,
    "attnx.significance": 4,
    "attnx.figures": 4,
    "attnx.compare": 4,
    "attnx.compare_report": 4,
    "attnx.compare_checks": 4,
    "attnx.matching": 4,
    "attnx.bench": 4,
    "attnx.dashboard": 4,
    "attnx.sync": 4,
    "attnx.plugins": 4,
    "attnx.cli": 4,
}
SIBLINGS = ("attnx.nn", "attnx.tasks")  # the bottom layer's two halves stay independent


def layer_of(module: str) -> tuple[int, str]:
    prefix = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[prefix], prefix


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def attnx_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n == "attnx" or n.startswith("attnx.")}


def test_every_module_has_a_layer_of_its_own() -> None:
    # an unlisted top-level module would fall to the package's own layer 0 and pass for foundation
    unlisted = [m for m in modules() if layer_of(m)[1] == "attnx" and m not in ("attnx", "attnx.__main__")]
    assert not unlisted, f"add these to LAYERS (and to ARCHITECTURE.md's layers table): {unlisted}"


@pytest.mark.parametrize(("module", "path"), modules().items(), ids=modules().keys())
def test_no_module_imports_from_a_higher_layer(module: str, path: Path) -> None:
    level, home = layer_of(module)
    for imported in attnx_imports(path):
        other, where = layer_of(imported)
        assert other <= level, f"{module} (layer {level}) imports {imported} (layer {other})"
        if home in SIBLINGS and where in SIBLINGS:
            assert where == home, f"{module} imports {imported}: nn and tasks must not depend on each other"


@pytest.mark.e2e
def test_bottom_layers_load_nothing_above_them_at_run_time() -> None:
    bottom = [m for m in modules() if layer_of(m)[0] <= 1 and not m.endswith("__main__")]  # __main__ runs
    code = (
        "import importlib, sys\n"
        f"for name in {bottom!r}: importlib.import_module(name)\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.split('.')[0] == 'attnx')))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    above = [m for m in loaded.split() if layer_of(m)[0] > 1]
    assert not above, f"importing nn and tasks loaded {above}"
