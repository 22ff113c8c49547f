"""results.json: the one record every run leaves, from its first second to its end.

A run writes `status: running` (with its pid, host and start time) before training, then ends as
`completed`, `failed` (with the error) or `interrupted` (by a signal, with the checkpoint it saved).
A `running` record whose run folder's lock nobody holds is a run that died without a word (kill -9,
a node lost): `status()` calls it `stale`, so `attnx report` and sweep summaries never count it
as live, and never miss it.

A **run folder** is one holding `results.json`, `.hydra/` or `run.lock`: what every run writes as it
starts (the lock first, then `.hydra/`, then its record), so a run whose record was lost or cut short is
still found (`find_runs`), and `attnx report` lists it with why it has no readable record.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from attnx.track.lock import LOCK, held

log = logging.getLogger("attnx")
RESULTS = "results.json"
# A record's `choices`, by registered name: the registry's kinds (`registry.KINDS`) in the order a run is
# described and a report's columns stand
CHOICES = ("task", "encoder", "decoder", "attention", "score")
MARKS = (RESULTS, ".hydra", LOCK)  # what makes a folder a run folder
RUN_FOLDER = f"a run folder holds {RESULTS}, .hydra/ or {LOCK}, which every run writes as it starts"


def write_atomically(path: Path, data: bytes) -> None:
    """`data` under `path`, whole or not at all: a temporary file, fsync, then rename. A failed write
    (a full disk) leaves neither a partial file under `path` nor the temporary one."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def unwritable(folder: Path) -> str | None:
    """Why `folder` cannot be made and written into, or None; makes it, as its first writer would."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return error.strerror or str(error)
    return None


def write_results(output_dir: str | Path, record: dict[str, Any]) -> Path:
    path = Path(output_dir) / RESULTS
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, (json.dumps(record, indent=2, sort_keys=False, default=str) + "\n").encode())
    return path


class Record(dict):
    """A run's record, written into its `output_dir` field's folder by the run's lead process (rank 0
    under DDP) only; the other ranks keep theirs in memory."""

    def __init__(self, lead: bool, /, **fields: Any) -> None:
        super().__init__(fields)
        self.lead = lead

    @property
    def output_dir(self) -> Path:
        return Path(self["output_dir"])

    def write(self) -> None:
        if self.lead:
            write_results(self.output_dir, self)

    def write_last(self) -> None:
        """The final record, even when the disk that failed the run fails this write too: then say so."""
        try:
            self.write()
        except OSError as error:
            folder, status = self.output_dir, self["status"]
            log.error("could not record %s's end (%s) in results.json: %s", folder, status, error)


class Unreadable(ValueError):
    """A results.json that holds no record; `reason` says why (where a truncated file ends)."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.reason = reason


def read_results(path: str | Path) -> dict[str, Any]:
    """A results.json's record; `Unreadable` naming the file and the line when it is not a JSON object."""
    try:
        text = Path(path).read_text()
        record = json.loads(text)
    except OSError as error:
        raise Unreadable(path, f"not readable: {error.strerror}") from error
    except UnicodeDecodeError as error:
        raise Unreadable(path, f"not UTF-8 text (byte {error.start})") from error
    except json.JSONDecodeError as error:
        raise Unreadable(path, _where(error)) from error
    if not isinstance(record, dict):
        raise Unreadable(path, f"a JSON {type(record).__name__}, not a run record")
    return record


def _where(error: json.JSONDecodeError) -> str:
    """Where and why the JSON breaks; a file that stops mid-record (a full disk, a copy cut short) says so."""
    end = len(error.doc.rstrip())
    if end == 0:
        return "empty"
    if error.pos >= end or error.msg.startswith("Unterminated string"):
        return f"ends at line {error.doc.count(chr(10), 0, end) + 1}, mid-record (truncated?)"
    return f"not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}"


def status(record: dict[str, Any], folder: str | Path) -> str:
    """The record's status, with `running` made `stale` when no live process holds the run's lock."""
    state = str(record.get("status"))
    return "stale" if state == "running" and not held(folder) else state


def completed(output_dir: str | Path) -> dict[str, Any] | None:
    """The run's record if it finished successfully, else None."""
    path = Path(output_dir) / RESULTS
    if not path.exists():
        return None
    try:
        record = read_results(path)
    except ValueError:
        return None
    return record if record.get("status") == "completed" else None


def moved(node: Any, before: str, after: str) -> Any:
    """Plain data (a record, a callback's state) with every path under folder `before` as under `after`,
    mapping keys and values alike (ModelCheckpoint's top-k is a mapping from path to score)."""
    if isinstance(node, dict):
        return {moved(k, before, after): moved(v, before, after) for k, v in node.items()}
    if isinstance(node, list):
        return [moved(v, before, after) for v in node]
    if isinstance(node, str) and node.startswith(before):
        return after + node[len(before) :]
    return node


def find_results(root: str | Path) -> list[Path]:
    return sorted(Path(root).rglob(RESULTS))


def find_runs(root: str | Path) -> list[Path]:
    """Every run folder under `root`, `root` included, in natural order (2 before 10)."""
    folders = {path.parent for mark in MARKS for path in Path(root).rglob(mark)}
    return sorted(folders, key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(p))])
