"""A run's key in the run store: a hash of everything that determines its numbers.

    key = sha256(config without UNRESULTED keys, attnx's version and source, the source file of every
                 registered class the run uses, torch's version, the machine's kernels, the data's files)

The project's training is deterministic and resumes exactly (tests/e2e/train/test_faults.py), so two runs
of one key give the same numbers; what differs between machines (the CPU's vendor and model, the kernel
family torch dispatches to, `threads`) is part of the key, so a store shared by a cluster never hands one
machine's numbers to another kind.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import platform
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import attnx
from attnx import registry
from attnx.config.resolved import UNRESULTED

KINDS = ("task", "encoder", "decoder", "attention", "score")  # a section named so, with a `name`, is a choice
# each entry of a list under these keys is a section of that kind: an lm's plan, `lm.layers`
LISTS = {"layers": "attention"}


@dataclass(frozen=True)
class RunKey:
    """The key (hex) and what it hashes, kept with a stored run so that `attnx store ls` can say it."""

    hex: str
    parts: dict[str, Any]


def run_key(cfg: DictConfig) -> RunKey:
    """The key of the run `cfg` (a composed `attnx train` config) describes."""
    whole = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(whole, dict)
    config = {str(k): v for k, v in whole.items() if k not in UNRESULTED}
    parts = {
        "config": config,
        "attnx": {"version": attnx.__version__, "source": _source_hash()},
        "plugins": {str(path): _file_hash(path) for path in sorted(_plugin_files(config))},
        "torch": _torch_version(),
        "machine": _machine(),
        "data": {str(path): _file_hash(path) for path in sorted(_data_files(config.get("task") or {}))},
    }
    text = json.dumps(parts, sort_keys=True, default=str)
    return RunKey(hashlib.sha256(text.encode()).hexdigest(), parts)


@cache
def _source_hash() -> str:
    """attnx's own Python source, every file, in path order."""
    root = Path(attnx.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _plugin_files(config: dict[str, Any]) -> set[Path]:
    """The source file, outside attnx, of each registered class the run chooses (every `name` of a
    section named after a kind, slots and an lm plan's entries included): an edit to a plugin changes its
    runs' keys only."""
    package = Path(attnx.__file__).parent
    files = set()
    for kind, name in _choices(config):
        try:
            source = inspect.getsourcefile(registry.get(kind, name))
        except (registry.RegistryError, TypeError):
            continue  # validation refuses the run before it is keyed
        if source is not None and not Path(source).resolve().is_relative_to(package):
            files.add(Path(source).resolve())
    return files


def _choices(node: Any, kind: str | None = None) -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        if kind is not None and isinstance(node.get("name"), str):
            yield kind, node["name"]
        for key, value in node.items():
            if isinstance(value, list) and key in LISTS:
                for entry in value:
                    yield from _choices(entry, LISTS[key])
            else:
                yield from _choices(value, key if key in KINDS else None)


def _data_files(task: dict[str, Any]) -> set[Path]:
    """The files a task reads: a value of its section naming an existing file, or the files in a folder."""
    found = set()
    for value in task.values():
        if not isinstance(value, str) or "${" in value:
            continue
        path = Path(value).expanduser()
        if path.is_file():
            found.add(path.resolve())
        elif path.is_dir():
            found |= {p.resolve() for p in path.rglob("*") if p.is_file()}
    return found


@cache
def _torch_version() -> str:
    import torch

    return torch.__version__


@cache
def _machine() -> dict[str, str]:
    """What makes the same arithmetic give other bits elsewhere: the CPU and the kernels torch picks."""
    import torch

    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        line = next((x for x in cpuinfo.read_text().splitlines() if x.startswith("model name")), "")
        model = line.partition(":")[2].strip()
    return {
        "arch": platform.machine(),
        "cpu": model or platform.processor(),
        "kernels": torch.backends.cpu.get_cpu_capability(),
    }
