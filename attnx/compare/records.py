"""A compare's run records, labelled: job i of a phase's plan is folder i of its sweep, so a run's task and
arm are known from where it is, never guessed from its config. Each is read (`attnx.report.runs.read_run`:
any status, or none, unreadable or invalid, with why) and labelled in memory (`labels`: the report's `task`
and `mechanism` columns, its seed and grid point); a completed one gets its task's metric as `test/metric`
and that metric's validation twin as `val/metric`, each with its declaration, so one table ranks tasks
whose metrics differ by name and every direction is the metric's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from attnx.compare.plan import WEIGHT_DECAY, Job, val_twin
from attnx.report.cli import mark_stale
from attnx.report.runs import Row, declared, read_run

METRIC, VAL_METRIC = "test/metric", "val/metric"  # each task's own metric, and its validation twin


def records(folder: Path, jobs: list[Job], cfg: DictConfig) -> list[dict[str, Any]]:
    """Job i's record from `folder/i`, labelled (module doc)."""
    found = []
    for i, job in enumerate(jobs):
        record = read_run(folder / str(i))
        record["labels"] = {
            "task": job.task,
            "mechanism": job.arm.label,
            "seed": job.seed,
            "optim.lr": job.lr,
            WEIGHT_DECAY: job.weight_decay,
            "budget": job.multiple,  # of the task's budget, its continuations included (attnx.compare.budget)
        }
        if record["status"] == "completed":
            _twins(record, str(cfg.tasks[job.task].metric))
        found.append(record)
    mark_stale(found)
    return found


def _twins(record: dict[str, Any], metric: str) -> None:
    """`metric` as `test/metric` and its validation twin as `val/metric`, with their declarations (a
    record from before they were kept: its model type's, `runs.declared`)."""
    twins = {METRIC: metric, VAL_METRIC: val_twin(metric)}
    metrics = record["metrics"]
    record["metrics"] = {**metrics, **{k: metrics[m] for k, m in twins.items() if m in metrics}}
    own = {k: d for k, m in twins.items() if (d := declared([record], m)) is not None}
    record["metric_declarations"] = {
        **(record.get("metric_declarations") or {}),
        **{k: {"higher_is_better": d.higher_is_better, "ceiling": d.ceiling} for k, d in own.items()},
    }


def rows(runs: list[dict[str, Any]], columns: list[str]) -> list[Row]:
    """The completed runs grouped by their labels' `columns`, in the order first seen."""
    found: dict[tuple[Any, ...], Row] = {}
    for run in runs:
        if run.get("status") == "completed":
            values = tuple(run["labels"][c] for c in columns)
            found.setdefault(values, Row(values, [])).runs.append(run)
    return list(found.values())
