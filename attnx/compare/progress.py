"""What a compare prints while a phase runs: one line per finished run, read from the run folders the phase
writes (job i in `folder/i`), so it works the same on every launcher (joblib's workers, SLURM's nodes):

    attnx compare: [12/150] reverse additive seed 3: test/exact_match 0.8730, converged · 4:12, ~48:00 left

The estimate is the mean wall time per run trained so far (runs taken from the store take none) times the
runs still to train. Hydra's own lines (the launch, every job's overrides) go to `<phase folder>/launch.log`
(conf/hydra/hydra_logging/launch_file.yaml), not to the terminal.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from omegaconf import DictConfig

from attnx.compare.plan import Job

POLL_S = 1.0  # how often the run folders are read
ENDED = ("completed", "failed")


class Progress:
    """A thread printing each launched job (job i in `folder/i`) once it has ended, until the phase ends."""

    def __init__(self, folder: Path, jobs: dict[int, Job], cfg: DictConfig) -> None:
        self.folder, self.jobs, self.cfg = folder, jobs, cfg
        # a folder's record as it was before the launch is not news (a run continued from it is: its
        # record is rewritten once it ends)
        self.before = {i: _stamp(folder / str(i)) for i in jobs}
        self.pending = set(jobs)
        self.trained = 0
        self.started = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()  # the runs that ended after the last look

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            self.poll()

    def poll(self) -> None:
        """Print a line for every run that has ended since the last poll."""
        from attnx.report.runs import read_run

        for i in sorted(self.pending):
            record = read_run(self.folder / str(i))
            if record["status"] in ENDED and _stamp(self.folder / str(i)) != self.before[i]:
                self.pending.discard(i)
                self.trained += "stored" not in record
                print(f"attnx compare: {self.line(self.jobs[i], record)}", flush=True)

    def line(self, job: Job, record: dict[str, Any]) -> str:
        done, total = len(self.jobs) - len(self.pending), len(self.jobs)
        budget = f" at {job.multiple}× budget" if job.multiple > 1 else ""
        what = f"[{done}/{total}] {job.task} {job.arm.label} seed {job.seed}{budget}"
        metric = str(self.cfg.tasks[job.task].metric)
        if record["status"] == "failed":
            outcome = f"failed ({record.get('error') or 'no error recorded'})"
        else:
            value = record.get("metrics", {}).get(metric)
            judged = (record.get("convergence") or {}).get("converged")
            state = {True: "converged", False: "still improving", None: "no convergence verdict"}[judged]
            stored = ", from the store" if "stored" in record else ""
            outcome = f"{metric} {'–' if value is None else f'{value:.4f}'}, {state}{stored}"
        elapsed = time.perf_counter() - self.started
        left = (
            ""
            if not self.trained or not self.pending
            else f", ~{clock(elapsed / self.trained * len(self.pending))} left"
        )
        return f"{what}: {outcome} · {clock(elapsed)}{left}"


def _stamp(folder: Path) -> int | None:
    """When the folder's record was last written (None: it has none yet)."""
    from attnx.track.results import RESULTS

    try:
        return (folder / RESULTS).stat().st_mtime_ns
    except OSError:
        return None


def clock(seconds: float) -> str:
    """m:ss, or h:mm:ss from an hour."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
