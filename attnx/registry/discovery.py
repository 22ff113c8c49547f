"""Plugin discovery: the built-ins, installed packages' `attnx.plugins` entry points, plugin folders.

Plugins are plain Python files or packages that call the `register_*` decorators. They are found in
installed packages' `attnx.plugins` entry points, attnx's own among them (the plugins it ships,
`attnx.contrib`), then in every folder of `ATTNX_PLUGIN_PATH` and in `./plugins` when it is trusted
(`plugin_dirs`); see `load_all`. While one imports, `current_origin()` names it, so the registry
records where each name came from. A plugin whose import takes long is named on stderr while it runs.

This module knows nothing of the registries themselves: it only imports code that registers.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Iterator
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

# Built-in modules whose import registers the built-in classes of each kind.
BUILTINS = ("attnx.nn.scores", "attnx.nn.attention", "attnx.nn.encoders", "attnx.nn.decoders", "attnx.tasks")

# After this long, one stderr line names the plugin being imported: an import that never returns would
# otherwise hang every command with no output.
SLOW_IMPORT_S = 5.0


class PluginImportError(ImportError):
    """A plugin file or entry point failed to import."""


class PluginImportInterrupted(KeyboardInterrupt):
    """Ctrl-C while a plugin was importing; the message names the plugin (the CLI prints it, exit 130)."""


_origin: str = "built-in"
_loaded_builtins = False
_loaded_paths: set[Path] = set()
_loaded_dists: set[str] = set()
_skipped: set[Path] = set()  # untrusted ./plugins folders already reported


def current_origin(module: str | None = None) -> str:
    """Where a class registered now from `module` comes from: "built-in", a plugin file, or an entry point.
    A module an installed package declares as an entry point is that entry point even when something
    imported it before discovery did (a test importing `attnx.contrib.linear`), or while another entry
    point's module imported it (`based` builds on `linear`)."""
    if module is not None and (_origin == "built-in" or _origin.startswith("dist ")):
        return _entry_point_origins().get(module, _origin)
    return _origin


@functools.cache
def _entry_points() -> tuple[tuple[str, EntryPoint], ...]:
    """Every `attnx.plugins` entry point with its distribution's name, one per name (the first on
    sys.path), found once per process: finding them reads every installed distribution's metadata,
    milliseconds that each registry lookup would pay again (`get` runs `load_all`). A plugin installed
    while a process runs is found by the next command, as Python finds a new package."""
    return tuple(
        (ep.dist.name if ep.dist is not None else ep.value, ep) for ep in entry_points(group="attnx.plugins")
    )


@functools.cache
def _entry_point_origins() -> dict[str, str]:
    """The origin `load_all` gives each entry point's module."""
    return {ep.module: _entry_point_origin(dist, ep) for dist, ep in _entry_points()}


def _entry_point_origin(dist: str, ep: EntryPoint) -> str:
    return f"dist {dist} ({ep.value})"


@contextlib.contextmanager
def _origin_as(origin: str) -> Iterator[None]:
    global _origin
    previous, _origin = _origin, origin
    try:
        yield
    finally:
        _origin = previous


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
        for module in BUILTINS:
            importlib.import_module(module)
    for dist, ep in _entry_points():
        if f"{dist}:{ep.name}" in _loaded_dists:
            continue
        _loaded_dists.add(f"{dist}:{ep.name}")
        what = f"plugin entry point '{ep.name}' ({ep.value}) of {dist}"
        try:
            with _origin_as(_entry_point_origin(dist, ep)), _importing(what):
                ep.load()
        except Exception as error:
            raise PluginImportError(f"{what} failed to import: {type(error).__name__}: {error}") from error
    for folder in plugin_dirs():
        for path in _plugin_files(folder):
            load_file(path)
