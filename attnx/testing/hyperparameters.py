"""The `hyperparameters` check: every hyperparameter does something. Each argument a config may set (the
constructor's, as `attnx.registry` makes its config fields) is given another value it may hold, and the
mechanism built with it must compute something else than with the value checked: other parameters, or
other outputs in eval mode, or in train mode with its dropout on (from the same seed). A hyperparameter
that the mechanism itself never reads (Luong's `input_feeding`, which the rnn decoder reads) is declared
in the class's `inert`, with why.

The other value: a bool's other one, another of a `Literal`'s choices, twice an int (or one more or less),
a float in [0, 1) halfway to 1 (a dropout rate), any other float doubled, None for an optional value and
a value for a None; then others (half an int: a window longer than the kit's sequences does nothing more
when doubled). One of them must change something; a value the constructor refuses (ValueError) is passed
over. A string without choices, or a type the kit cannot vary, is not checked."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator
from functools import partial
from typing import Any, Literal

import torch

from attnx.nn.attention import Attention
from attnx.nn.scores import Score
from attnx.registry import STRUCTURAL, init_parameters
from attnx.testing.base import DOES_SOMETHING, Check, registrar, require
from attnx.testing.calls import raw_call, seeded
from attnx.testing.cases import LONG, Case, Setting, Subject, cases_for

CHECKS: list[Check] = []
check = registrar(CHECKS)


@check("hyperparameters", DOES_SOMETHING, settings=lambda setting: setting.lengths == LONG)
def _hyperparameters(subject: Subject, setting: Setting) -> None:
    """Each varied hyperparameter's other value changes the parameters or an output (eval mode, or train
    mode with dropout on); with the long setting's perturbed parameters, where a table or gate that starts
    at zero shows."""
    for kind, cls, values, variant in _varied(subject):
        declared = cls.inert
        for p in init_parameters(cls):
            if (
                p.name in STRUCTURAL[kind]
                or p.name in declared
                or p.default is p.empty
                and p.name not in values
            ):
                continue
            current = values.get(p.name, p.default)
            tried = []
            for other in alternatives(current, p.annotation):
                changed = variant(p.name, other)
                built = _built(changed, setting)
                if built is None:
                    continue  # refused at these dims: try another value
                tried.append(other)
                if _differs(_built(subject, setting), built, setting):
                    break
            else:
                require(
                    not tried,
                    f"({setting}): {p.name}={_shown(tried[0] if tried else None)} computes exactly what "
                    f"{p.name}={_shown(current)} computes (the same parameters, and the same outputs in eval "
                    "mode and in train mode with dropout on, from the same seed): a value the config may "
                    f"hold changes nothing. Use it, or declare it in {cls.__name__}.inert with why (a "
                    "hyperparameter that the host reads, not the mechanism)",
                )


def _varied(subject: Subject) -> Iterator[tuple[str, type[Attention] | type[Score], dict[str, Any], Any]]:
    """(kind, class, its values, a function (name, value) -> the subject with that value) for the
    mechanism and the score whose hyperparameters the subject varies (`Subject.vary`)."""
    if "attention" in subject.vary and subject.score_cls is None:
        yield (
            "attention",
            subject.cls,
            subject.hyperparams,
            lambda name, value: dataclasses.replace(
                subject, hyperparams={**subject.hyperparams, name: value}, **_fresh()
            ),
        )
    score = subject.score_class()
    if "score" in subject.vary and score is not None:
        values = subject.score_hyperparams if subject.score_cls is not None else _keywords(subject.score)

        def with_score(name: str, value: Any) -> Subject:
            bound = {**values, name: value}
            return dataclasses.replace(
                subject, score=partial(score, **bound), score_hyperparams=bound, **_fresh()
            )

        yield "score", score, values, with_score


def _keywords(factory: Any) -> dict[str, Any]:
    """The hyperparameters bound to a score factory (a partial's keywords, nested partials merged)."""
    found: dict[str, Any] = {}
    while isinstance(factory, partial):
        found = {**factory.keywords, **found}
        factory = factory.func
    return found


def _fresh() -> dict[str, Any]:
    """A replaced subject's caches, empty."""
    return {"_built": {}, "_cases": {}, "_outputs": {}, "memo": {}}


def alternatives(value: Any, annotation: Any) -> list[Any]:
    """Other values a config field of `annotation` may hold than `value`, the likeliest to be valid first."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal:
        return [choice for choice in args if choice != value]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        inner = next(a for a in args if a is not type(None))
        return ([None] if value is not None else []) + alternatives(
            value if value is not None else _seed(inner), inner
        )
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [2 * value, value // 2, value + 1, value - 1] if value > 1 else [value + 1, value + 2]
    if isinstance(value, float):
        return [(value + 1) / 2, 2 * value] if 0 <= value < 1 else [2 * value, value / 2, value + 1]
    return []


def _seed(annotation: Any) -> Any:
    """A value to vary around for an optional field now None: the kit's smallest plausible one."""
    return {bool: False, int: 1, float: 0.5}.get(annotation)


def _built(subject: Subject, setting: Setting) -> tuple[Any, list[Case]] | None:
    """The subject's mechanism for its first call in the setting, with perturbed parameters in eval mode,
    and the setting's calls; None when the constructor refuses the value at these dims."""
    key = ("varied", setting)
    if key not in subject.memo:
        try:
            pairs = cases_for(subject, setting)
        except AssertionError:
            subject.memo[key] = None
            return None
        att = pairs[0][0]
        subject.memo[key] = att, [case for other, case in pairs if other is att]
    return subject.memo[key]


def _differs(a: tuple[Any, list[Case]] | None, b: tuple[Any, list[Case]], setting: Setting) -> bool:
    """Whether two built mechanisms differ in their parameters, or in an output of one of the calls in eval
    mode or in train mode with dropout on (each from the same seed)."""
    assert a is not None  # the subject itself was built by the checks before
    (one, cases), (two, _) = a, b
    if _structure(one) != _structure(two):
        return True
    for train in (False, True):
        one.train(train)
        two.train(train)
        try:
            for case in cases:
                with seeded(0):
                    x = raw_call(one, case)
                try:
                    with seeded(0):
                        y = raw_call(two, case)
                except AssertionError:  # it cannot take this call, which the other takes: something else
                    return True
                if any(_unequal(p, q) for p, q in zip(x, y)):
                    return True
        finally:
            one.eval()
            two.eval()
    return False


def _unequal(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Whether two outputs differ at all: presence, shape or any bit."""
    if a is None or b is None:
        return (a is None) != (b is None)
    return a.shape != b.shape or not torch.equal(a, b)


def _structure(module: Any) -> list[tuple[str, tuple[int, ...], bool]]:
    """(name, shape, learnt) of every parameter and buffer."""
    return [(n, tuple(t.shape), True) for n, t in module.named_parameters()] + [
        (n, tuple(t.shape), False) for n, t in module.named_buffers()
    ]


def _shown(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
