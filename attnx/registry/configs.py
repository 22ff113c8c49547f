"""Structured configs from constructor signatures, stored in Hydra's ConfigStore.

A registered class gets a dataclass (group = kind, name = registered name) mirroring its constructor
(`signatures.init_parameters`: its own arguments and those it passes up through `**kwargs`), so
`score=cosine score.temperature=0.1` works with no YAML and `score.temperature=abc` fails naming the
field and its type. Arguments the model assembler supplies (`STRUCTURAL`) and slots are not fields of
their own: a slot is a config sub-group (`encoder/attention=dot`).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from omegaconf import MISSING

from attnx.registry.signatures import init_parameters
from attnx.registry.slots import Slot, slot_fields, slots_of

# Constructor arguments that the model assembler supplies; all others are hyperparameters.
# `num_heads` reaches a score only when its constructor takes it (per-head parameters: t5_bias).
STRUCTURAL: dict[str, tuple[str, ...]] = {
    "score": ("query_dim", "key_dim", "num_heads"),
    "attention": ("query_dim", "key_dim", "value_dim", "score"),
    "encoder": ("vocab_size",),
    "decoder": ("vocab_size", "enc_dim", "cross_attention"),
    "task": (),
}


@dataclass(frozen=True)
class Entry:
    """One registered class: its kind, its name, and where it came from."""

    kind: str
    name: str
    cls: type[Any]  # Any: each kind's class has its own attributes (model_type, placement, ...)
    origin: str  # "built-in", a plugin file path, or "dist <name> (<entry point>)"

    @property
    def where(self) -> str:
        """Source location of the class, for duplicate-name errors."""
        try:
            return f"{inspect.getsourcefile(self.cls)}:{inspect.getsourcelines(self.cls)[1]}"
        except (OSError, TypeError):
            return self.cls.__module__

    def hyperparams(self) -> dict[str, Any]:
        """Name -> default (MISSING when required) of the user-settable constructor arguments; slots
        (config sub-groups) are not among them."""
        skip = {"name", "defaults", *slot_fields(self.cls)}
        return {f.name: _default_of(f) for f in dataclasses.fields(config_class(self)) if f.name not in skip}


def _default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return MISSING


def config_class(entry: Entry) -> type:
    """A dataclass mirroring the constructor: `name` first, then each hyperparameter, typed."""
    cached: type | None = vars(entry.cls).get("_attnx_config")  # its own, not a parent's
    if cached is not None and dataclasses.fields(cached)[0].default == entry.name and _intact(cached):
        return cached
    slots = slots_of(entry.cls)
    skip = set(STRUCTURAL[entry.kind]) | set(slot_fields(entry.cls))
    fields: list[tuple[str, Any, Any]] = [("name", str, dataclasses.field(default=entry.name))]
    for p in init_parameters(entry.cls):
        if p.name in skip:
            continue
        default = MISSING if p.default is p.empty else p.default
        if isinstance(default, (list, dict, tuple)):
            field: Any = dataclasses.field(default_factory=partial(_same, default))
        else:
            field = dataclasses.field(default=default)
        fields.append((p.name, _config_type(p.annotation), field))
    if slots:
        # `_self_` first: the groups' options then fill the slot fields that stand at None here
        defaults = ["_self_", *({name: option} for name, option in _slot_defaults(slots))]
        fields.append(("defaults", list[Any], dataclasses.field(default_factory=lambda: list(defaults))))
        fields += [(name, Any, dataclasses.field(default=None)) for name in slot_fields(entry.cls)]
    attention = getattr(entry.cls, "default_attention", None) if entry.kind == "task" else None
    if attention is not None:
        # the task's own default mechanism (an lm's self-attention); `attention=...` still wins, as
        # command-line overrides come after every defaults list
        task_defaults = [{"override /attention@_global_.attention": attention}, "_self_"]
        fields.append(("defaults", list[Any], dataclasses.field(default_factory=lambda: list(task_defaults))))
    conf = dataclasses.make_dataclass(f"{entry.cls.__name__}Config", fields)
    entry.cls._attnx_config = conf
    return conf


def _intact(conf: type) -> bool:
    """False once a pickle round trip in this process has reset the class: a joblib sweep's cloudpickle
    sends the dynamic class by value and, on the way back, sets its state on the original, with copies of
    `dataclasses.MISSING` that no longer compare identical (cloudpipe/cloudpickle#386 kept only the
    field-type sentinels): a field without a plain default would then read as having one, the copy, and
    OmegaConf would refuse the class."""
    sentinels = [s for f in dataclasses.fields(conf) for s in (f.default, f.default_factory)]
    return all(s is dataclasses.MISSING for s in sentinels if isinstance(s, type(dataclasses.MISSING)))


def _config_type(annotation: Any) -> Any:
    """Map a Python annotation to one OmegaConf can validate (unknown types become Any)."""
    simple = (int, float, bool, str)
    if annotation in simple:
        return annotation
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and rest[0] in simple:
            return typing.Optional[rest[0]]  # noqa: UP045 - OmegaConf needs typing.Optional
        return Any
    if origin is typing.Literal and args and all(isinstance(a, str) for a in args):
        return str
    if origin in (list, tuple) and args and args[0] in simple:
        return list[args[0]]  # type: ignore[valid-type]
    return Any


def _same(value: Any) -> Any:
    """A mutable default's factory, `partial(_same, default)`: dataclasses refuse it as a plain default."""
    return value


def _slot_defaults(slots: dict[str, Slot]) -> Iterator[tuple[str, str | None]]:
    for name, slot in slots.items():
        yield name, slot.default
        yield slot.score, None  # no score named: the mechanism's own default_score


# Config groups of slots: kind -> the groups ("encoder/attention", ...) whose options are its names.
_slot_groups: dict[str, set[str]] = {"attention": set(), "score": set()}


def new_slot_groups(entry: Entry) -> list[tuple[str, str]]:
    """(kind, group) of each slot config group `entry` brings that no class brought before: the caller
    stores every name of that kind in it."""
    new = []
    for name, slot in slots_of(entry.cls).items():
        for kind, group in (("attention", f"{entry.kind}/{name}"), ("score", f"{entry.kind}/{slot.score}")):
            if group not in _slot_groups[kind]:
                _slot_groups[kind].add(group)
                new.append((kind, group))
    return new


def store(kind: str, name: str, node: type) -> None:
    """`name`'s config in its kind's group and in every slot group of that kind."""
    for group in (kind, *sorted(_slot_groups.get(kind, ()))):
        store_group(group, name, node)


def store_group(group: str, name: str, node: type) -> None:
    from hydra.core.config_store import ConfigStore  # not at import: `import attnx` stays light

    ConfigStore.instance().store(group=group, name=name, node=node)
