"""When the run a folder held before is the run about to start: the questions `resume=auto` and the run
store ask of a run folder (`attnx.train.run`). A run is identified by its overrides, less the keys that change
none of its results; a run resumed from a checkpoint is the run its key describes only when it goes on as
one uninterrupted run would (`attnx.lit.resume`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from attnx.config.resolved import UNRESULTED
from attnx.track.results import RESULTS, read_results

LIMITS = {"max_epochs": "epochs", "max_steps": "steps"}  # the trainer's limits, and what a record counts


def same_run(before: list[str], now: list[str]) -> bool:
    """A completed run is the same job when only keys that change none of its results differ (UNRESULTED:
    `resume=`, a sweep launched again; `store=`, `summary=`, a compare folder from before they were set)."""

    def key(overrides: list[str]) -> list[str]:
        return sorted(o for o in overrides if _top(o) not in UNRESULTED)

    return key(before) == key(now)


def _top(override: str) -> str:
    """The top-level key an override sets: `paths` of `paths.output_dir=...`, `logger` of `+logger/csv=x`."""
    return re.split(r"[./=]", override.lstrip("+~"), maxsplit=1)[0]


def earlier(output_dir: Path) -> dict[str, Any] | None:
    """The record a run folder held before this run began (None: none, or unreadable)."""
    try:
        return read_results(output_dir / RESULTS)
    except (OSError, ValueError):
        return None


def resumes_exactly(trained: dict[str, Any], before: dict[str, Any] | None, trainer: DictConfig) -> bool:
    """Whether a run (`trained`, its record; `trainer`, its config) is the run its overrides describe:
    trained from scratch; or resumed from a run of the same overrides (interrupted: it goes on as the
    uninterrupted run); or continued from a completed run that its budget stopped, of the same overrides
    but for the trainer's limits, which are now at least as long (it goes on as one run of the longer
    budget would, under a schedule that does not decay: `attnx.compare.budget` checks that)."""
    if trained.get("resumed_from") is None:
        return True
    if before is None:
        return False
    if same_run(before["overrides"], trained["overrides"]):
        return True
    limits = tuple(f"trainer.{limit}=" for limit in LIMITS)
    if before.get("status") != "completed" or not same_run(
        [o for o in before["overrides"] if not o.startswith(limits)],
        [o for o in trained["overrides"] if not o.startswith(limits)],
    ):
        return False
    was = (before.get("config") or {}).get("trainer") or {}
    bounded = [limit for limit in LIMITS if not _unbounded(was.get(limit))]
    stopped = any(int(before.get(LIMITS[limit]) or 0) >= int(was[limit]) for limit in bounded)
    longer = all(
        _unbounded(trainer.get(limit)) or int(trainer[limit]) >= int(was[limit]) for limit in bounded
    )
    return stopped and longer


def _unbounded(limit: Any) -> bool:
    return limit is None or int(limit) <= 0
