"""One run per folder: an exclusive `flock` on `<run>/run.lock`, held for the whole run.

The kernel releases the lock when its process dies, however it dies (kill -9 included), so a lock is
never left held by a dead run. The file's content names the holder (pid, host, start time) for the
second process's error, and stays behind when a holder dies without releasing: the next run that
takes the lock finds it and says it took over a stale lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

LOCK = "run.lock"


class RunFolderBusy(RuntimeError):
    """Another live process holds the run folder's lock; the message names it."""


class RunLock:
    def __init__(self, folder: str | Path) -> None:
        self.path = Path(folder) / LOCK
        self.stale: dict[str, Any] | None = None  # the previous holder's record when it died holding the lock
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise RunFolderBusy(
                f"run folder {self.path.parent} is in use by pid {holder.get('pid', '?')} on "
                f"{holder.get('host', '?')} (since {holder.get('started', '?')}); "
                "wait for it or choose another folder (hydra.run.dir=...)"
            ) from None
        self.stale = _read(fd) or None
        os.ftruncate(fd, 0)
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%F %T")}
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Empty the file (a clean release leaves no holder to report), then unlock."""
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing the last descriptor releases the flock
        self._fd = None


def held(folder: str | Path) -> bool:
    """Whether a live process holds `folder`'s run lock (a shared probe that never blocks)."""
    path = Path(folder) / LOCK
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _read(fd: int) -> dict[str, Any]:
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}
