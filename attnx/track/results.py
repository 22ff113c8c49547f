"""results.json: the one record every run leaves, from its first second to its end.

A run writes `status: running` (with its pid, host and start time) before training, then ends as
`completed`, `failed` (with the error) or `interrupted` (by a signal, with the checkpoint it saved).
A `running` record whose run folder's lock nobody holds is a run that died without a word (kill -9,
a node lost): `status()` calls it `stale`, so `attnx report` and sweep summaries never count it
as live, and never miss it.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from attnx.track.lock import held

log = logging.getLogger("attnx")
RESULTS = "results.json"


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


def read_results(path: str | Path) -> dict[str, Any]:
    """A results.json's record; ValueError naming the file when it is not a JSON object."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not readable JSON ({error})") from error
    if not isinstance(record, dict):
        raise ValueError(f"{path}: a JSON {type(record).__name__}, not a run record")
    return record


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


def find_results(root: str | Path) -> list[Path]:
    return sorted(Path(root).rglob(RESULTS))
