"""Plugin registries: one per kind (score, attention, encoder, decoder, task).

A registered class gets a structured config in Hydra's ConfigStore (group = kind, name =
registered name) built from its constructor signature, so `score=cosine score.temperature=0.1`
works with no YAML and `score.temperature=abc` fails naming the field and its type.

A name can have aliases (`register_attention("additive", aliases=("bahdanau",))`), and a renamed
class keeps its old name working with a FutureWarning (`registry("score").deprecate("old", "new")`,
timm's `register_model_deprecations`), so configs, results.json files and checkpoints that name it
still load. `upgrade` makes a config section saved by an older version buildable today.

Plugins are plain Python files or packages that call the `register_*` decorators. They are found
in installed packages' `attnx.plugins` entry points, attnx's own among them (the plugins it ships,
`attnx.contrib`), then in every folder of `ATTNX_PLUGIN_PATH` and in `./plugins` when it is trusted
(`plugin_dirs`); see `load_all`. A plugin whose import takes long is named on stderr while it runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import threading
import types
import typing
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from omegaconf import MISSING

KINDS = ("score", "attention", "encoder", "decoder", "task")

# Built-in modules whose import registers the built-in classes of each kind.
_BUILTINS = ("attnx.nn.scores", "attnx.nn.attention", "attnx.nn.encoders", "attnx.nn.decoders", "attnx.tasks")
ROLES = ("self", "causal", "cross")  # what an attention site asks of its mechanism (Attention's flags)


@dataclass(frozen=True)
class Slot:
    """An attention site inside a registered class (a self-attention encoder's layers, a decoder's self-
    attention). The class lists its slots in `slots = {"attention": Slot(...)}`; the slot's field and its
    `score` field become config sub-groups (`encoder/attention=dot encoder/score=general`, then
    `encoder.attention.*` hyperparameters), and the constructor receives, under the slot's name, a
    factory (query_dim, key_dim, value_dim) -> Attention with the score built in.

    role: "self" (bidirectional self-attention), "causal" (self-attention under a causal mask) or
    "cross"; `default`: the mechanism when the user names none.
    """

    default: str
    role: str
    score: str = "score"


def slots_of(cls: type) -> dict[str, Slot]:
    return dict(getattr(cls, "slots", {}))


class RegistryError(ValueError):
    """A bad registration or an unknown name; the message is meant for the user."""


class PluginImportError(ImportError):
    """A plugin file or entry point failed to import."""


class PluginImportInterrupted(KeyboardInterrupt):
    """Ctrl-C while a plugin was importing; the message names the plugin (the CLI prints it, exit 130)."""


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    cls: type
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


def slot_fields(cls: type) -> list[str]:
    """The config fields of a class's slots: each slot's mechanism field, then its score field."""
    return [name for slot_name, slot in slots_of(cls).items() for name in (slot_name, slot.score)]


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return MISSING


# Constructor arguments that the model assembler supplies; all others are hyperparameters.
# `num_heads` reaches a score only when its constructor takes it (per-head parameters: t5_bias).
STRUCTURAL: dict[str, tuple[str, ...]] = {
    "score": ("query_dim", "key_dim", "num_heads"),
    "attention": ("query_dim", "key_dim", "value_dim", "score"),
    "encoder": ("vocab_size",),
    "decoder": ("vocab_size", "enc_dim", "cross_attention"),
    "task": (),
}

_origin: str = "built-in"


@contextlib.contextmanager
def _origin_as(origin: str) -> Iterator[None]:
    global _origin
    previous, _origin = _origin, origin
    try:
        yield
    finally:
        _origin = previous


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
        return getattr(importlib.import_module(module), name)

    def register(self, name: str, aliases: Iterable[str] = ()) -> Callable[[type], type]:
        """Class decorator: register `cls` as `name`; each alias is an equal second name."""

        def decorator(cls: type) -> type:
            if not (isinstance(cls, type) and issubclass(cls, self.base)):
                raise RegistryError(
                    f"cannot register {cls!r} as {self.kind} '{name}': it must subclass "
                    f"{self.base.__module__}.{self.base.__name__}"
                )
            entry = Entry(self.kind, name, cls, _origin)
            if name in self._entries and self._entries[name].cls is not cls:
                raise RegistryError(
                    f"{self.kind} '{name}' is registered twice: at {self._entries[name].where} "
                    f"and at {entry.where}"
                )
            self._entries[name] = entry
            _store_config(entry)
            for alias in aliases:
                self._add_name(self._aliases, alias, name)
            return cls

        return decorator

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
        _store(self.kind, other, config_class(self._entries[name]))  # its `name` field holds `name`

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
                FutureWarning,
                stacklevel=3,
            )
            return self._renamed[name]
        name = self._aliases.get(name, name)
        if name not in self._entries:
            raise RegistryError(unknown_message(self.kind, name, self.names(), self._aliases))
        return name

    def entry(self, name: str) -> Entry:
        return self._entries[self.canonical(name)]

    def get(self, name: str) -> type:
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


def registry(kind: str) -> Registry:
    if kind not in REGISTRIES:
        raise RegistryError(unknown_message("registry kind", kind, list(KINDS)))
    return REGISTRIES[kind]


def available(kind: str) -> list[str]:
    """Registered names of one kind (built-ins and discovered plugins)."""
    load_all()
    return registry(kind).names()


def get(kind: str, name: str) -> type:
    load_all()
    return registry(kind).get(name)


def build(kind: str, cfg: Any, **structural: Any) -> Any:
    """Instantiate `cfg.name` of `kind` with its hyperparameters from `cfg` plus `structural` args."""
    params = {k: v for k, v in dict(cfg).items() if k != "name"}
    return get(kind, cfg["name"])(**structural, **params)


class StaleArguments(RegistryError):
    """A saved section's hyperparameters that today's class no longer takes (see `upgrade`)."""


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
    stale = " ".join(f"{k}={section[k]!r}" for k in sorted(set(section) - set(known) - set(slots) - {"name"}))
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
    return upgraded


# ---------------------------------------------------------------------------------------------
# Structured configs from constructor signatures


def config_class(entry: Entry) -> type:
    """A dataclass mirroring the constructor: `name` first, then each hyperparameter, typed."""
    cached = getattr(entry.cls, "_attnx_config", None)
    if cached is not None and cached.__dataclass_fields__["name"].default == entry.name:
        return cached
    slots = slots_of(entry.cls)
    skip = set(STRUCTURAL[entry.kind]) | set(slots) | {"self"}
    signature = inspect.signature(entry.cls.__init__)
    try:
        hints = typing.get_type_hints(entry.cls.__init__)
    except Exception:  # unresolvable annotations degrade to Any, never to a crash
        hints = {}
    fields: list[tuple[str, Any, Any]] = [("name", str, dataclasses.field(default=entry.name))]
    for p in signature.parameters.values():
        if p.name in skip or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        annotation = _config_type(hints.get(p.name, Any))
        default = MISSING if p.default is p.empty else p.default
        if isinstance(default, (list, dict, tuple)):
            fields.append((p.name, annotation, dataclasses.field(default_factory=lambda d=default: d)))
        else:
            fields.append((p.name, annotation, dataclasses.field(default=default)))
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
        return list[args[0]]
    return Any


def _slot_defaults(slots: dict[str, Slot]) -> Iterator[tuple[str, str | None]]:
    for name, slot in slots.items():
        yield name, slot.default
        yield slot.score, None  # no score named: the mechanism's own default_score


# Config groups of slots: kind -> the groups ("encoder/attention", ...) whose options are its names.
_slot_groups: dict[str, set[str]] = {"attention": set(), "score": set()}


def slot_groups() -> dict[str, list[str]]:
    """Each slot config group ("encoder/attention", ...) -> the registered names that have that slot."""
    found: dict[str, list[str]] = {}
    for kind in ("encoder", "decoder"):
        for name in REGISTRIES[kind].names():
            for field in slot_fields(REGISTRIES[kind].get(name)):
                found.setdefault(f"{kind}/{field}", []).append(name)
    return found


def _store_config(entry: Entry) -> None:
    _store(entry.kind, entry.name, config_class(entry))
    for name, slot in slots_of(entry.cls).items():
        for kind, group in (("attention", f"{entry.kind}/{name}"), ("score", f"{entry.kind}/{slot.score}")):
            if group not in _slot_groups[kind]:
                _slot_groups[kind].add(group)
                for other, target in REGISTRIES[kind].config_names():
                    _store_group(group, other, config_class(target))


def _store(kind: str, name: str, node: type) -> None:
    for group in (kind, *sorted(_slot_groups.get(kind, ()))):
        _store_group(group, name, node)


def _store_group(group: str, name: str, node: type) -> None:
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(group=group, name=name, node=node)


# ---------------------------------------------------------------------------------------------
# Plugin discovery

# After this long, one stderr line names the plugin being imported: an import that never returns would
# otherwise hang every command with no output.
SLOW_IMPORT_S = 5.0

_loaded_builtins = False
_loaded_paths: set[Path] = set()
_loaded_dists: set[str] = set()
_skipped: set[Path] = set()  # untrusted ./plugins folders already reported


def plugin_dirs() -> list[Path]:
    """`./plugins` when trusted, then each folder of ATTNX_PLUGIN_PATH.

    `./plugins` is code in whatever folder a command starts in, so it is imported only when it is
    attnx's own checkout's folder or ATTNX_PLUGIN_PATH names it (`ATTNX_PLUGIN_PATH=plugins`). Otherwise
    one line on stderr says it was skipped and how to enable it.
    """
    listed = [Path(p).resolve() for p in os.environ.get("ATTNX_PLUGIN_PATH", "").split(os.pathsep) if p]
    local = (Path.cwd() / "plugins").resolve()
    dirs = listed
    if local.is_dir() and local not in listed:
        if local == Path(__file__).resolve().parents[2] / "plugins":
            dirs = [local, *listed]
        elif local not in _skipped:
            _skipped.add(local)
            print(
                f"attnx: not importing {local} (code in the launch folder runs only when trusted); "
                "to use it: ATTNX_PLUGIN_PATH=plugins",
                file=sys.stderr,
            )
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def load_file(path: Path) -> None:
    """Import one plugin file (or package folder); an import failure names the file."""
    path = path.resolve()
    if path in _loaded_paths:
        return
    init = path / "__init__.py" if path.is_dir() else path
    # a digest, not hash(): str hashes are salted per process, and workers must agree on the name
    digest = hashlib.blake2b(str(path).encode(), digest_size=4).hexdigest()
    module_name = f"attnx_plugins.{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(
        module_name, init, submodule_search_locations=[str(path)] if path.is_dir() else None
    )
    if spec is None or spec.loader is None:
        raise PluginImportError(f"plugin {path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        with _origin_as(str(path)), _importing(f"plugin {path}"):
            spec.loader.exec_module(module)
    except Exception as error:
        sys.modules.pop(module_name, None)
        raise PluginImportError(f"plugin {path} failed to import: {type(error).__name__}: {error}") from error
    _loaded_paths.add(path)


@contextlib.contextmanager
def _importing(what: str) -> Iterator[None]:
    """Around one plugin's import: one stderr line naming it once it has taken SLOW_IMPORT_S, and Ctrl-C
    during it raised as PluginImportInterrupted naming it."""

    def say() -> None:
        print(f"attnx: importing {what} has taken {SLOW_IMPORT_S:g} s so far (Ctrl-C stops)", file=sys.stderr)

    timer = threading.Timer(SLOW_IMPORT_S, say)
    timer.daemon = True  # never keeps the process alive
    timer.start()
    try:
        yield
    except KeyboardInterrupt:
        raise PluginImportInterrupted(f"interrupted while importing {what}") from None
    finally:
        timer.cancel()


def _plugin_files(folder: Path) -> list[Path]:
    found = []
    for child in sorted(folder.iterdir()):
        if child.name.startswith(("_", ".")):
            continue
        if child.suffix == ".py" or (child.is_dir() and (child / "__init__.py").exists()):
            found.append(child)
    return found


def load_all() -> None:
    """Register the built-ins and every discoverable plugin. Idempotent and cheap when repeated.

    Entry points come before plugin folders: a folder's file that registers a name an installed plugin
    already has (a shipped plugin copied without renaming) is then the one named in the error.
    """
    global _loaded_builtins
    if not _loaded_builtins:
        _loaded_builtins = True
        for module in _BUILTINS:
            importlib.import_module(module)
    for ep in entry_points(group="attnx.plugins"):  # one distribution per name: the first on sys.path
        dist = ep.dist.name if ep.dist is not None else ep.value
        if f"{dist}:{ep.name}" in _loaded_dists:
            continue
        _loaded_dists.add(f"{dist}:{ep.name}")
        what = f"plugin entry point '{ep.name}' ({ep.value}) of {dist}"
        try:
            with _origin_as(f"dist {dist} ({ep.value})"), _importing(what):
                ep.load()
        except Exception as error:
            raise PluginImportError(f"{what} failed to import: {type(error).__name__}: {error}") from error
    for folder in plugin_dirs():
        for path in _plugin_files(folder):
            load_file(path)
