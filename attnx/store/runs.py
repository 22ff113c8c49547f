"""The run store: finished runs kept by their key (`attnx.store.key`), so a run trained once is never trained
again. `store=DIR` in a run's config (`attnx compare` sets it for every run: `auto`, the user's cache) makes
`attnx.train.run` look its key up first:

    with store.claim(key):                   # an flock per key: a second process wanting it waits
        if store.fetch(key, run folder): done   # checksummed; a corrupt or partial entry is removed
        else: train, then store.put(key, run folder)

A stored entry is `entries/<key>/`: the run folder's files and `entry.json` (what the key hashed, each
file's sha256, when and by which attnx it was stored). It is written under `tmp/` and renamed into place,
so an entry is whole or absent; a process killed while training holds no lock (the kernel drops it).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attnx
from attnx.store.key import RunKey
from attnx.track.lock import LOCK
from attnx.track.results import RESULTS, completed, moved, write_atomically

log = logging.getLogger("attnx")
ENTRY = "entry.json"
SKIPPED = (LOCK, "compile_cache")  # a run folder's files that are no part of its result


def default_root() -> Path:
    """`$XDG_CACHE_HOME/attnx/runs`, else `~/.cache/attnx/runs`."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "attnx" / "runs"


def root_of(store: str | None) -> Path | None:
    """The folder `store=` names: `auto` is `default_root()`, null none."""
    if store is None:
        return None
    return default_root() if store == "auto" else Path(store).expanduser()


@dataclass(frozen=True)
class Entry:
    """One stored run, as `attnx store ls` lists it."""

    key: str
    path: Path
    meta: dict[str, Any]

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root

    @contextmanager
    def claim(self, key: RunKey) -> Iterator[None]:
        """Hold `key`'s lock: the one process that trains it, while the others wanting it wait."""
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        fd = os.open(locks / f"{key.hex}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def fetch(self, key: RunKey, folder: Path, overrides: list[str]) -> dict[str, Any] | None:
        """The stored run of `key` copied into `folder` (its record saying where it came from and
        taking this job's `overrides` and folder), or None when none is stored whole."""
        entry = self.root / "entries" / key.hex
        meta = _intact(entry)
        if meta is None:
            if entry.exists():
                log.warning("run store: entry %s is corrupt or partial; removed, the run trains", entry)
                shutil.rmtree(entry, ignore_errors=True)
            return None
        for name in meta["files"]:
            if name != RESULTS:
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(entry / name, folder / name)
        for path in _files(folder):  # an earlier run's checkpoints (a continuation's shorter run's): stale
            if ".ckpt" in path.suffixes and path.relative_to(folder).as_posix() not in meta["files"]:
                path.unlink()
        record = json.loads((entry / RESULTS).read_text())
        before = record["output_dir"]
        record = moved(record, before, str(folder))
        record["overrides"] = overrides
        record["stored"] = {"key": key.hex, "from": before, **{k: meta[k] for k in ("stored", "attnx")}}
        write_atomically(folder / RESULTS, json.dumps(record, indent=2).encode())
        return record

    def put(self, key: RunKey, folder: Path) -> None:
        """`folder`'s completed run under `key` (nothing if it did not complete, or is stored already)."""
        if completed(folder) is None or (self.root / "entries" / key.hex).exists():
            return
        tmp = self.root / "tmp" / uuid.uuid4().hex
        files = {}
        for path in _files(folder):
            name = path.relative_to(folder).as_posix()
            if not name.endswith(".tmp"):
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, tmp / name)
                files[name] = _sha256(tmp / name)
        meta = {
            "key": key.parts,
            "files": files,
            "stored": time.strftime("%Y-%m-%d %H:%M:%S"),
            "attnx": attnx.__version__,
        }
        write_atomically(tmp / ENTRY, json.dumps(meta, indent=1, default=str).encode())
        entries = self.root / "entries"
        entries.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(tmp, entries / key.hex)
        except OSError:  # stored meanwhile by another process: the same numbers
            shutil.rmtree(tmp, ignore_errors=True)

    def record(self, key: RunKey) -> dict[str, Any] | None:
        """The record of `key`'s stored run, as it was stored, when its entry is whole (None otherwise)."""
        entry = self.root / "entries" / key.hex
        if _read_meta(entry) is None:
            return None
        try:
            return json.loads((entry / RESULTS).read_text())
        except (OSError, ValueError):
            return None

    def entries(self) -> list[Entry]:
        """Every whole entry, oldest first."""
        found = []
        for path in sorted((self.root / "entries").glob("*")):
            meta = _read_meta(path)
            if meta is not None:
                found.append(Entry(path.name, path, meta))
        return sorted(found, key=lambda e: e.meta["stored"])

    def remove(self, entry: Entry) -> None:
        shutil.rmtree(entry.path, ignore_errors=True)


def _files(folder: Path) -> list[Path]:
    """A run folder's files that are part of its result (not its lock, not the compile cache), sorted."""
    return [
        path
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.relative_to(folder).parts[0] not in SKIPPED
    ]


def _read_meta(entry: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((entry / ENTRY).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and {"files", "stored", "attnx"} <= set(meta) else None


def _intact(entry: Path) -> dict[str, Any] | None:
    """The entry's meta if every file it lists is there with its checksum (a results.json among them)."""
    meta = _read_meta(entry)
    if meta is None or RESULTS not in meta["files"]:
        return None
    for name, digest in meta["files"].items():
        path = entry / name
        if not path.is_file() or _sha256(path) != digest:
            return None
    return meta


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
