"""A sweep's outcome in one line and in its exit code, and launcher workers that die with their sweep.

`SweepSummary` is a Hydra callback (conf/hydra/default.yaml): when every job of a multirun has ended,
it counts the runs' statuses from their results.json files and prints `3 completed, 1 failed: see …`.
`attnx train` exits non-zero when any run did not complete (`take_failed`).

`RunNames`, a Hydra callback too, makes `hydra.job.override_dirname` (what W&B and TensorBoard name
runs by) hold only the overrides that differ between a sweep's runs: `attention=dot`, not the dozen
keys the command line sets to one value for every run.

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
from omegaconf import DictConfig, read_write

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


class RunNames(Callback):
    """Before a multirun launches: exclude from every job's `override_dirname` the keys that the sweep's
    command line sets to one value, so that what is left is what distinguishes a run (the swept keys, an
    experiment's or Optuna's parameters). It is Hydra's own `exclude_keys`, added to the overrides the
    sweeper composes each job with (launchers that run jobs elsewhere get it in the job's config); keys
    the user excludes stay excluded."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
        fixed = [o.key_or_group for o in parsed if not o.is_sweep_override()]
        excluded = dict.fromkeys([*config.hydra.job.config.override_dirname.exclude_keys, *fixed])
        keys = ",".join(f"'{key}'" for key in excluded)  # Hydra's grammar allows no quote in a key
        with read_write(config.hydra.overrides):
            config.hydra.overrides.hydra.append(f"hydra.job.config.override_dirname.exclude_keys=[{keys}]")


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
