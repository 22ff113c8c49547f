"""A sweep's outcome in one line and in its exit code, and launcher workers that die with their sweep.

`SweepSummary` is a Hydra callback (conf/hydra/default.yaml): when every job of a multirun has ended,
it counts the runs' statuses from their results.json files and prints `3 completed, 1 failed: see …`.
`attnx train` exits non-zero when any run did not complete (`take_failed`).

`watch_parent` runs in a launcher's worker process (joblib's loky workers, submitit_local's jobs). A
worker outlives a sweep whose main process was killed with -9, idle, holding its memory; the watcher
notices that its parent is gone and ends the worker: SIGTERM when a run is in progress (it saves a
checkpoint and records `interrupted`), exit otherwise.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from attnx.track.results import find_results, read_results, status

log = logging.getLogger("attnx")
PARENT = "ATTNX_SWEEP_PID"  # set by `attnx train` for the processes its launcher starts
_outcome: Counter[str] = Counter()
_watching = threading.Event()
_busy = threading.Event()  # a run is in progress in this process


class SweepSummary(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _outcome.clear()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        root = Path(config.hydra.sweep.dir)
        records = {}
        for path in find_results(root):
            try:
                records[path] = status(read_results(path), path.parent)
            except ValueError:
                records[path] = "unreadable"
        _outcome.update(records.values())
        bad = [path for path, state in records.items() if state != "completed"]
        order = sorted(_outcome.items(), key=lambda kv: kv[0] != "completed")  # completed first
        counts = ", ".join(f"{n} {state}" for state, n in order)
        where = f": see {bad[0]}" + (f" and {len(bad) - 1} more" if len(bad) > 1 else "") if bad else ""
        print(f"attnx: sweep {root}: {counts or 'no runs'}{where}", flush=True)


def take_failed() -> int:
    """How many runs of the multirun that just ended in this process did not complete (0 after a
    single run); reading it forgets it."""
    failed = sum(n for state, n in _outcome.items() if state != "completed")
    _outcome.clear()
    return failed


def watch_parent() -> None:
    """In a worker started by `attnx train`'s launcher, end this process when that parent dies."""
    parent = os.getppid()
    if os.environ.get(PARENT) != str(parent) or _watching.is_set():
        return
    _watching.set()
    threading.Thread(target=_watch, args=(parent,), name="attnx-parent-watch", daemon=True).start()


def running(busy: bool) -> None:
    """Tell the watcher whether a run is in progress (it then sends SIGTERM instead of exiting)."""
    (_busy.set if busy else _busy.clear)()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    if not _busy.is_set():
        os._exit(1)
    log.error("the sweep's main process (pid %d) is gone; stopping this run", parent)
    os.kill(os.getpid(), signal.SIGTERM)
    deadline = time.monotonic() + 120  # to save a checkpoint and the record; then go regardless
    while _busy.is_set() and time.monotonic() < deadline:
        time.sleep(0.2)
    os._exit(1)
