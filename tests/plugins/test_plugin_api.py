"""One import for plugin authors: everything a plugin needs comes from `attnx`, and the shipped plugins
(attnx/contrib/) use nothing else of attnx, as a user's own plugin would, but one another (`based` builds on
`linear`, as a user's plugin may)."""

import ast
from pathlib import Path

import attnx
import attnx.contrib
from attnx.nn.multihead import MultiHeadAttention

CONTRIB = sorted(Path(attnx.contrib.__file__).parent.glob("*.py"))


def attnx_modules_imported(path: Path) -> set[str]:
    """Every attnx module a file imports (`import attnx.x`, `from attnx.x import y`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {name for name in found if name.split(".")[0] == "attnx"}


def test_the_shipped_plugins_import_only_from_attnx_itself() -> None:
    assert len(CONTRIB) > 5
    shipped = {f"attnx.contrib.{path.stem}" for path in CONTRIB}
    deeper = {path.name: sorted(attnx_modules_imported(path) - {"attnx", *shipped}) for path in CONTRIB}
    assert {name: found for name, found in deeper.items() if found} == {}


def test_every_plugin_api_name_is_listed_shown_and_resolves() -> None:
    assert set(attnx._LAZY) <= set(attnx.__all__)
    assert set(attnx.__all__) <= set(dir(attnx))
    assert all(getattr(attnx, name) is not None for name in attnx.__all__)
    assert attnx.MultiHeadAttention is MultiHeadAttention


def test_type_checkers_see_every_lazy_name_from_the_module_it_is_loaded_from() -> None:
    tree = ast.parse(Path(attnx.__file__).read_text())
    guarded = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    seen = {alias.name: node.module for node in guarded.body for alias in node.names}
    assert seen == attnx._LAZY
