"""What a check is: a named test of one property of the contract (ARCHITECTURE.md, Contracts), run in each
setting where the capability flags promise it; its failure names the property and the evidence."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnx.testing.cases import Setting, Subject

ATOL = 1e-8  # float64: equal computations agree far below this
CACHE_ATOL = 1e-5  # a cache, a single query or a reference may legitimately sum in another order

# The properties that the checks hold a plugin to, as behaviour: what a failure names. The first six are
# the ones a plugin most easily breaks without noticing (ARCHITECTURE.md, Contracts); the rest are the 2015
# contract's and the sites'.
CAUSAL = "causal means prefix-invariant"
PURE = "eval is a pure function"
DERIVATIVE = "the gradient is the derivative of the forward pass"
DOES_SOMETHING = "every hyperparameter does something"
STATE = "decoding state is state"
WEIGHTS = "weights are what they claim to be"


@dataclass(frozen=True)
class Check:
    """`run(subject, setting)` raises AssertionError when `property` breaks; it runs only where
    `applies(subject)` (the capability flags) says it is promised, in the settings `settings` accepts."""

    name: str
    property: str  # what the check holds the plugin to, named by its failure (no parentheses)
    run: Callable[[Subject, Setting], None]
    applies: Callable[[Subject], bool]
    settings: Callable[[Setting], bool]  # the settings it runs in: all but where one adds nothing


def registrar(into: list[Check]) -> Callable[..., Callable]:
    """A decorator `@check(name, property, applies=..., settings=...)` that appends the function to
    `into`."""

    def check(
        name: str,
        property: str,
        applies: Callable[[Subject], bool] = lambda subject: True,
        settings: Callable[[Setting], bool] = lambda setting: True,
    ) -> Callable:
        def register(run: Callable[[Subject, Setting], None]) -> Callable[[Subject, Setting], None]:
            into.append(Check(name, property, run, applies, settings))
            return run

        return register

    return check


def require(condition: Any, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def causal(subject: Subject) -> bool:
    return subject.cls.causal and subject.cls.self_attention


def cross(subject: Subject) -> bool:
    return subject.cls.cross_attention
