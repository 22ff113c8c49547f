"""Model types are declared once (`attnx.registry.model_types`): nothing else in the package compares or
dispatches on a model type's name, each built-in's declared metrics are what its module logs, and a
declaration that contradicts itself, or a second one under a taken name, is refused."""

from __future__ import annotations

import ast

import pytest

from attnx import registry
from attnx.registry import Metric, ModelType, RegistryError, model_type, model_types, register_model_type

from helpers.paths import PACKAGE
from helpers.runs import assembled, resolved
from helpers.tiny import TINY_BUDGET, TINY_LM, TINY_MODEL

DECLARED = PACKAGE / "registry" / "model_types.py"  # the one module allowed to name them


def dispatches(source: str) -> list[str]:
    """Each place in `source` that compares a model type with literal names (`model_type == "lm"`,
    `spec.model_type in ("seq2seq", ...)`), or keys a table by them, as `line: code`."""
    names = {t.name for t in model_types()}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            typed = any(_mentions_model_type(o) for o in operands)
            literal = any(_is_literal(o) and _strings(o) for o in operands)
            if typed and literal:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            if len(keys & names) >= 2:
                found.append(f"{node.lineno}: a table keyed by model types {sorted(keys & names)}")
    return found


def _mentions_model_type(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and n.attr == "model_type")
        or (isinstance(n, ast.Name) and n.id == "model_type")
        for n in ast.walk(node)
    )


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _is_literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant | ast.Tuple | ast.List | ast.Set)


def test_no_module_but_the_declarations_dispatches_on_a_model_type_name() -> None:
    registry.load_all()
    found = {
        str(path.relative_to(PACKAGE.parent)): hits
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != DECLARED and (hits := dispatches(path.read_text()))
    }
    assert not found, f"dispatch on a model type's name outside {DECLARED.name}: {found}"


@pytest.mark.parametrize(
    "code",
    [
        "if spec.model_type == 'lm': pass",
        "ok = task.model_type != 'seq2seq'",
        "x = model_type in ('classification', 'lm')",
        "TABLE = {'seq2seq': 1, 'lm': 2}",
    ],
)
def test_the_check_catches_each_way_of_writing_one(code: str) -> None:
    registry.load_all()
    assert dispatches(code), code


@pytest.mark.parametrize(
    "overrides",
    [
        ["task=reverse", *TINY_MODEL],
        ["task=sentiment", "encoder.hidden_dim=8"],
        TINY_LM,
        ["task=mqar", "task.test_slices=[2]", "lm.d_model=16", "lm.num_layers=1"],
    ],
    ids=["seq2seq", "classification", "lm", "lm with a slice"],
)
def test_what_a_run_declares_it_logs_is_what_its_module_logs(overrides: list[str]) -> None:
    """Configuration, preflight and compare's checks read the declaration without building a module."""
    _, module, _ = assembled([*overrides, *TINY_BUDGET, "paths.output_dir=unused"])
    run = resolved([*overrides, *TINY_BUDGET, "paths.output_dir=unused"])
    assert run.logged("val") == module.logged_metrics("val")
    assert run.logged("test") == module.logged_metrics("test")
    assert run.judged == f"val/{run.model_type.headline}"


def test_a_module_logging_other_metrics_than_declared_is_refused() -> None:
    from torchmetrics import MeanMetric, MetricCollection

    _, module, _ = assembled([*TINY_LM, *TINY_BUDGET, "paths.output_dir=unused"])
    with pytest.raises(TypeError, match="logs .'loss'., but model type lm declares"):
        module.evaluated_by(MetricCollection({"loss": MeanMetric()}))


def test_an_unknown_model_type_lists_the_registered_ones() -> None:
    with pytest.raises(RegistryError, match="unknown model type 'translation'.*classification, lm, seq2seq"):
        model_type("translation")


def test_a_declaration_is_checked_and_its_name_taken_once() -> None:
    lm = model_type("lm")
    assert register_model_type(lm) is lm  # the same entry again: harmless (a module imported twice)
    with pytest.raises(RegistryError, match="model type 'lm' is registered twice"):
        register_model_type(ModelType(**{**lm.__dict__, "headline": "exact_match"}))
    with pytest.raises(RegistryError, match="f1 is not one of its metrics"):
        ModelType(**{**lm.__dict__, "name": "other", "report": ("f1",)})
    with pytest.raises(RegistryError, match="targets='tokens'"):
        ModelType(**{**lm.__dict__, "name": "other", "targets": "tokens"})
    assert Metric("acc").at("test@2x") == "test@2x/acc"


def test_every_piece_of_every_built_in_resolves() -> None:
    for declared in model_types():
        for piece in ("sites", "model", "module", "maps", "answer"):
            assert callable(declared.piece(piece)), (declared.name, piece)
