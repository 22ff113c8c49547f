"""The package's plan, checked: its layers import one way (foundation <- nn, tasks <- models, testing,
contrib <- config, lit, track <- commands), no module imports itself back, within a layer either, and no
module (attnx's or hydra_plugins') is over MAX_LINES lines: one that grows past is split by idea.

Checked statically on every `import attnx...` in a module's source (function-level imports included):
each names its own layer or a lower one, and the graph of module imports has no cycle. At run time,
importing every module of the two bottom layers in a fresh interpreter loads nothing from a higher one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helpers.architecture import LAYERS, layer_of, modules
from helpers.paths import REPO

SIBLINGS = ("attnx.nn", "attnx.tasks")  # the bottom layer's two halves stay independent
MAX_LINES = 400  # a module longer than this holds more than one idea (brief, ARCHITECTURE.md)
SOURCES = ("attnx", "hydra_plugins")


def too_long(root: Path, folders: tuple[str, ...] = SOURCES, limit: int = MAX_LINES) -> list[str]:
    """`path: N lines` for each Python file under `folders` of `root` longer than `limit` lines."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            count = len(path.read_text().splitlines())
            if count > limit:
                found.append(f"{path.relative_to(root).as_posix()}: {count} lines")
    return found


def test_no_module_is_over_the_line_limit() -> None:
    long = too_long(REPO)
    assert not long, f"modules over {MAX_LINES} lines, to split by idea: {'; '.join(long)}"


def test_the_line_limit_names_each_long_file_with_its_count(tmp_path: Path) -> None:
    (tmp_path / "attnx" / "sub").mkdir(parents=True)
    (tmp_path / "hydra_plugins").mkdir()
    (tmp_path / "attnx" / "sub" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "attnx" / "at_limit.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "hydra_plugins" / "plugin.py").write_text("x = 1\n" * 450)
    assert too_long(tmp_path) == [
        f"attnx/sub/long.py: {MAX_LINES + 1} lines",
        "hydra_plugins/plugin.py: 450 lines",
    ]


def attnx_imports(path: Path) -> set[str]:
    """The attnx modules `path` imports: `from attnx.a import b` imports `attnx.a.b` when that is a module."""
    known = modules()
    tree = ast.parse(path.read_text())
    guards = [node for node in ast.walk(tree) if _type_checking(node)]
    unrun = {id(n) for guard in guards for statement in guard.body for n in ast.walk(statement)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in unrun:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & set(known)
            names |= submodules or {node.module}
    return {n for n in names if n == "attnx" or n.startswith("attnx.")}


def _type_checking(node: ast.AST) -> bool:
    """`if TYPE_CHECKING:`: imports for type checkers only (attnx/__init__.py's plugin API), never run."""
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (or a module importing itself), by Tarjan."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def import_graph() -> dict[str, set[str]]:
    return {module: attnx_imports(path) - {"attnx"} for module, path in modules().items()}


def test_the_module_imports_have_no_cycle() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle_within_a_layer() -> None:
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}, "b": {"b"}}
    assert cycles(graph) == [["a.x", "a.y", "a.z"], ["b"]]


def test_every_top_level_package_and_module_has_a_layer() -> None:
    # an unlisted top-level module would fall to the package's own layer 0 and pass for foundation
    unlisted = [m for m in modules() if layer_of(m)[1] == "attnx" and m != "attnx"]
    assert not unlisted, f"add these to LAYERS (and to ARCHITECTURE.md's layers table): {unlisted}"
    top = {".".join(m.split(".")[:2]) for m in modules()}
    differ = sorted(set(LAYERS) ^ top)
    assert not differ, f"LAYERS has an entry per top-level package or module, and no other: {differ}"


@pytest.mark.parametrize(("module", "path"), modules().items(), ids=modules().keys())
def test_no_module_imports_from_a_higher_layer(module: str, path: Path) -> None:
    level, home = layer_of(module)
    for imported in attnx_imports(path):
        other, where = layer_of(imported)
        assert other <= level, f"{module} (layer {level}) imports {imported} (layer {other})"
        if home in SIBLINGS and where in SIBLINGS:
            assert where == home, f"{module} imports {imported}: nn and tasks must not depend on each other"
