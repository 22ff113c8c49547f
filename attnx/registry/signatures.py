"""A constructor's parameters as its callers may pass them: its own, and, when it takes `**kwargs`, those
of the next constructor up the class's MRO (recursively), which is where `super().__init__(**kwargs)`
sends them.

So a subclass lists only what it adds or changes (`def __init__(self, *args, window: int = 16,
**kwargs)` on top of `multi_head`), and its config class, its `attnx plugins` row and a task's cache
key still see every argument, typed.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

_PASSING = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def init_parameters(cls: type) -> list[inspect.Parameter]:
    """The named parameters of `cls(...)`, `self` left out, each annotated with its resolved type (Any
    when it has none or it cannot be resolved).

    Order: the constructor's own as written, with the inherited ones standing where `*args` stands (the
    arguments it passes on positionally), else where `**kwargs` does. A parameter the subclass declares
    again (to change its default or type) wins, and keeps the place the parent gives it, so the config's
    fields read in the same order along a class family.
    """
    return _parameters(cls, 0)


def _parameters(cls: type, start: int) -> list[inspect.Parameter]:
    """The parameters of the first `__init__` defined in cls.__mro__[start:], following its **kwargs."""
    at, owner = next((i, k) for i, k in enumerate(cls.__mro__[start:], start) if "__init__" in vars(k))
    if owner is object:
        return []
    init = vars(owner)["__init__"]
    try:
        hints = typing.get_type_hints(init)
    except Exception:  # unresolvable annotations degrade to Any, never to a crash
        hints = {}
    written = list(inspect.signature(init).parameters.values())[1:]  # past self
    own = [p.replace(annotation=hints.get(p.name, Any)) for p in written if p.kind not in _PASSING]
    kinds = [p.kind for p in written]
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        return own
    passing = next(p for p in written if p.kind in _PASSING)  # *args if any (it comes first), else **kwargs
    before = sum(1 for p in written[: written.index(passing)] if p.kind not in _PASSING)
    inherited = _parameters(cls, at + 1)
    mine = {p.name: p for p in own}
    added = [p for p in own if p.name not in {q.name for q in inherited}]
    added_before = [p for p in added if own.index(p) < before]
    added_after = [p for p in added if own.index(p) >= before]
    return [*added_before, *(mine.get(p.name, p) for p in inherited), *added_after]
