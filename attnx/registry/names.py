"""Names: one registry per kind (score, attention, encoder, decoder, task), and the lookups that use them.

A name can have aliases (`register_attention("additive", aliases=("bahdanau",))`), and a renamed
class keeps its old name working with a FutureWarning (`registry("score").deprecate("old", "new")`,
timm's `register_model_deprecations`), so configs, results.json files and checkpoints that name it
still load. `upgrade` makes a config section saved by an older version buildable today.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from attnx.registry.configs import Entry, config_class, new_slot_groups, store, store_group
from attnx.registry.discovery import current_origin, load_all
from attnx.registry.slots import slots_of

KINDS = ("score", "attention", "encoder", "decoder", "task")  # the one list of the kinds

_C = TypeVar("_C", bound=type)  # a registered class keeps its own type


class RegistryError(ValueError):
    """A bad registration or an unknown name; the message is meant for the user."""


class StaleArguments(RegistryError):
    """A saved section's hyperparameters that today's class no longer takes (see `upgrade`)."""


class RenamedWarning(FutureWarning):
    """A renamed name was read (a registered class's, or a config key's: `config.compose.RENAMED`): it
    works today and will be removed. A FutureWarning to Python callers; `attnx`'s command line prints it
    as one line, `attnx COMMAND: warning: ...` (`attnx.cli`)."""


class Registry:
    """Name -> class for one kind, with did-you-mean lookups and ConfigStore entries."""

    def __init__(self, kind: str, base: str) -> None:
        self.kind = kind
        self._base = base  # "module:Class", resolved lazily to keep `import attnx` light
        self._entries: dict[str, Entry] = {}
        self._aliases: dict[str, str] = {}  # another name -> the registered name
        self._renamed: dict[str, str] = {}  # a deprecated name -> the registered name

    @property
    def base(self) -> type:
        module, name = self._base.split(":")
        base: type = getattr(importlib.import_module(module), name)
        return base

    def register(self, name: str, aliases: Iterable[str] = ()) -> Callable[[_C], _C]:
        """Class decorator: register `cls` as `name`; each alias is an equal second name."""

        def decorator(cls: _C) -> _C:
            if not (isinstance(cls, type) and issubclass(cls, self.base)):
                raise RegistryError(
                    f"cannot register {cls!r} as {self.kind} '{name}': it must subclass "
                    f"{self.base.__module__}.{self.base.__name__}"
                )
            entry = Entry(self.kind, name, cls, current_origin(cls.__module__))
            if name in self._entries and self._entries[name].cls is not cls:
                raise RegistryError(self._twice(self._entries[name], entry))
            self._entries[name] = entry
            _store_config(entry)
            for alias in aliases:
                self._add_name(self._aliases, alias, name)
            return cls

        return decorator

    def _twice(self, first: Entry, second: Entry) -> str:
        """Why `name` cannot be registered again: two plugins chose it, or one file was imported twice under
        two module names (attnx imports a plugin folder's files itself, and a test imported one again)."""
        twice = f"{self.kind} '{first.name}' is registered twice"
        if first.where != second.where:
            return f"{twice}: at {first.where} and at {second.where}"
        return (
            f"{twice} by one class, {second.where}, imported as two modules ({first.cls.__module__} and "
            f"{second.cls.__module__}): attnx imports the plugin itself (from ATTNX_PLUGIN_PATH, ./plugins "
            f"or "
            f"an entry point); elsewhere, get the class by name, attnx.registry.get('{self.kind}', "
            f"'{first.name}'), instead of importing its file again"
        )

    def deprecate(self, old: str, new: str) -> None:
        """`old` was renamed `new`: it still resolves, with a FutureWarning, on the command line, in
        configs and in checkpoints."""
        self._add_name(self._renamed, old, new)

    def _add_name(self, table: dict[str, str], other: str, name: str) -> None:
        if name not in self._entries:
            raise RegistryError(unknown_message(self.kind, name, self.names()))
        if other in self._entries or self._target(other) not in (None, name):
            raise RegistryError(f"{self.kind} '{other}' already names {self._target(other) or other}")
        table[other] = name
        store(self.kind, other, config_class(self._entries[name]))  # its `name` field holds `name`

    def _target(self, other: str) -> str | None:
        return self._aliases.get(other) or self._renamed.get(other)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def aliases(self, name: str) -> list[str]:
        """The other names of a registered name: aliases, then deprecated ones."""
        return [a for table in (self._aliases, self._renamed) for a, n in sorted(table.items()) if n == name]

    def canonical(self, name: str) -> str:
        """The registered name behind `name` (itself, an alias's, or a deprecated name's, with a warning)."""
        if name in self._renamed:
            warnings.warn(
                f"{self.kind} '{name}' was renamed '{self._renamed[name]}'; the old name will be removed",
                RenamedWarning,
                stacklevel=3,
            )
            return self._renamed[name]
        name = self._aliases.get(name, name)
        if name not in self._entries:
            raise RegistryError(unknown_message(self.kind, name, self.names(), self._aliases))
        return name

    def entry(self, name: str) -> Entry:
        return self._entries[self.canonical(name)]

    def get(self, name: str) -> Any:
        """The class registered as `name`: Any, as each kind's classes have attributes of their own
        (a task's model_type, an attention's placement) and mypy's partial() refuses a type[Any]."""
        return self.entry(name).cls

    def config_names(self) -> Iterator[tuple[str, Entry]]:
        """Every name a config may use (registered, alias, deprecated) with the entry it builds."""
        for name in [*self._entries, *self._aliases, *self._renamed]:
            yield name, self._entries[self._target(name) or name]

    def __contains__(self, name: str) -> bool:
        return name in self._entries or self._target(name) is not None


def unknown_message(kind: str, name: str, names: list[str], aliases: Iterable[str] = ()) -> str:
    """ "unknown score 'x'; did you mean 'y'? available: ...", the closest of names and aliases."""
    close = difflib.get_close_matches(name, [*names, *aliases], n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else ";"
    return f"unknown {kind} '{name}'{hint} available: {', '.join(names) or '(none)'}"


REGISTRIES: dict[str, Registry] = {
    "score": Registry("score", "attnx.nn.scores:Score"),
    "attention": Registry("attention", "attnx.nn.attention:Attention"),
    "encoder": Registry("encoder", "attnx.nn.encoders:Encoder"),
    "decoder": Registry("decoder", "attnx.nn.decoders:Decoder"),
    "task": Registry("task", "attnx.tasks.base:Task"),
}

register_score = REGISTRIES["score"].register
register_attention = REGISTRIES["attention"].register
register_encoder = REGISTRIES["encoder"].register
register_decoder = REGISTRIES["decoder"].register
register_task = REGISTRIES["task"].register


def _store_config(entry: Entry) -> None:
    """The entry's config in the ConfigStore; a slot group it is the first to bring gets every name of
    the slot's kind registered so far (later ones reach it through `store`)."""
    store(entry.kind, entry.name, config_class(entry))
    for kind, group in new_slot_groups(entry):
        for other, target in REGISTRIES[kind].config_names():
            store_group(group, other, config_class(target))


def slot_groups() -> dict[str, list[str]]:
    """Each slot config group ("encoder/attention", ...) -> the registered names that have that slot."""
    found: dict[str, list[str]] = {}
    for kind in ("encoder", "decoder"):
        for name in REGISTRIES[kind].names():
            for slot_name, slot in slots_of(REGISTRIES[kind].get(name)).items():
                for field in (slot_name, slot.score):  # a plan's field is a list, not a group
                    found.setdefault(f"{kind}/{field}", []).append(name)
    return found


def registry(kind: str) -> Registry:
    if kind not in REGISTRIES:
        raise RegistryError(unknown_message("registry kind", kind, list(KINDS)))
    return REGISTRIES[kind]


def available(kind: str) -> list[str]:
    """Registered names of one kind (built-ins and discovered plugins)."""
    load_all()
    return registry(kind).names()


def get(kind: str, name: str) -> Any:
    """The class registered as `name` of `kind`, after loading every plugin (see `Registry.get`)."""
    load_all()
    return registry(kind).get(name)


def build(kind: str, cfg: Any, **structural: Any) -> Any:
    """Instantiate `cfg.name` of `kind` with its hyperparameters from `cfg` plus `structural` args;
    a class that takes `**kwargs` passes the ones it does not name on up to its parent's constructor."""
    params = {k: v for k, v in dict(cfg).items() if k != "name"}
    return get(kind, cfg["name"])(**structural, **params)


def upgrade(kind: str, section: Mapping[str, Any], dropped: list[str] | None = None) -> dict[str, Any]:
    """A config section saved earlier (a checkpoint's model spec), made buildable by today's classes:
    an alias or renamed name becomes the registered one; hyperparameters it gained since take their
    defaults. One it no longer takes (removed, or renamed: its saved value would silently give way to
    the new name's default) is a StaleArguments error naming it and its saved value, unless the
    caller passes `dropped`: then it is left out and listed there, `attention 'NAME' KEY=VALUE`
    (fairseq's `merge_with_parent(..., remove_missing=True)`), for the caller to say so."""
    load_all()
    entry = registry(kind).entry(section["name"])
    known = entry.hyperparams()
    slots = {
        f: k
        for name, slot in slots_of(entry.cls).items()
        for f, k in ((name, "attention"), (slot.score, "score"))
    }
    plans = {slot.plan for slot in slots_of(entry.cls).values() if slot.plan}
    fields = set(known) | set(slots) | plans | {"name"}
    stale = " ".join(f"{k}={section[k]!r}" for k in sorted(set(section) - fields))
    if stale:
        if dropped is None:
            raise StaleArguments(f"{kind} '{entry.name}' no longer takes {stale}, saved with the model")
        dropped.append(f"{kind} '{entry.name}' {stale}")
    upgraded = {"name": entry.name, **{k: v for k, v in section.items() if k in known}}
    for field, slot_kind in slots.items():
        value = section.get(field)
        if isinstance(value, str):  # a slot saved as a plain name (`encoder.score: scaled_dot`)
            value = {"name": value}
        upgraded[field] = None if value is None else upgrade(slot_kind, value, dropped)
    for field in plans:
        if section.get(field) is not None:
            upgraded[field] = upgrade_plan(section[field], dropped)
    return upgraded


def upgrade_plan(
    layers: Sequence[Mapping[str, Any]], dropped: list[str] | None = None
) -> list[dict[str, Any]]:
    """A saved per-layer plan (`lm.layers`, `encoder.layers`) made buildable today, layer by layer: each
    entry an attention section, with its own score section when it has one."""
    upgraded = []
    for layer in layers:
        done = upgrade("attention", {k: v for k, v in layer.items() if k != "score"}, dropped)
        if layer.get("score") is not None:
            done["score"] = upgrade("score", layer["score"], dropped)
        upgraded.append(done)
    return upgraded
