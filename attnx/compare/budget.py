"""Budgets that follow the curve (`budget_cap`): a final run still improving when its budget ends is
continued from its checkpoint, one budget at a time, until its validation curve converges or it has trained
for `budget_cap` times its suite task's budget:

    multiple 1        every job, at the task's budget (the trainer's limits: max_epochs, max_steps)
    multiple m → m+1  the jobs at m whose run is still improving (results.json's convergence verdict is
                      False), launched again in their folders with the limits at (m+1)× and resume=auto

A continued run goes on from its last checkpoint exactly as one run of the longer budget would
(`attnx.lit.resume`), so its record, and its key in the run store, are that run's. The rule is the same for
every arm, classic or candidate; a run still improving at the cap is what the report calls not converged.
It holds only where the learning rate over a run's first budget does not depend on how long the run is:
`check_schedule` refuses a decaying schedule (a cosine to zero at the last step) with one line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from attnx.compare.phases import launch, same
from attnx.compare.plan import Job
from attnx.config.compose import ConfigError
from attnx.config.resolved import ResolvedRun
from attnx.track.results import completed

Resolved = Mapping[tuple[str, str], ResolvedRun]  # check_arms': (task, arm label) -> the run resolved

PROBE_STEPS = 1000  # the budget, in optimiser steps, at which check_schedule compares a schedule's rates


def base(job: Job, resolved: Resolved) -> Mapping[str, int]:
    """The trainer's limits of `job`'s run at 1× (its task's budget)."""
    return resolved[(job.task, job.arm.label)].budget


def adopt(folder: Path, cfg: DictConfig, jobs: list[Job], runs: list[str], resolved: Resolved) -> list[Job]:
    """The jobs, each at the multiple its folder's completed run was continued to by an earlier launch of
    this compare (so that launching it again does not train it back at 1×)."""
    adopted = list(jobs)
    for i, job in enumerate(jobs):
        record = completed(folder / str(i))
        if record is None:
            continue
        for multiple in range(2, cfg.budget_cap + 1):
            longer = job.at_multiple(multiple, base(job, resolved))
            if same(record["overrides"], [*runs, *longer.overrides(cfg.tasks[job.task])]):
                adopted[i] = longer
    return adopted


def follow(
    folder: Path, cfg: DictConfig, jobs: list[Job], runs: list[str], resolved: Resolved
) -> tuple[list[Job], int]:
    """The final jobs after continuing every run still improving, a budget at a time, up to the cap (module
    doc); and how many continued runs did not complete."""
    jobs, failed = list(jobs), 0
    for multiple in range(2, cfg.budget_cap + 1):
        grown = [i for i, j in enumerate(jobs) if j.multiple == multiple - 1 and improving(folder / str(i))]
        if not grown:
            break
        for i in grown:
            jobs[i] = jobs[i].at_multiple(multiple, base(jobs[i], resolved))
        print(
            f"attnx compare: {len(grown)} run(s) still improving at {multiple - 1}× budget: "
            f"continued to {multiple}× (budget_cap={cfg.budget_cap})",
            flush=True,
        )
        failed += launch(folder, cfg, jobs, runs, only=grown)
    return jobs, failed


def improving(folder: Path) -> bool:
    """Whether the completed run in `folder` was still improving when its budget ended."""
    record = completed(folder)
    return record is not None and (record.get("convergence") or {}).get("converged") is False


def check_schedule(cfg: DictConfig, resolved: Resolved) -> None:
    """With `budget_cap` > 1, a ConfigError naming the first task whose runs' learning-rate schedule
    changes over a run's first budget when the budget grows: a continuation would not be the longer run."""
    if cfg.budget_cap <= 1:
        return
    checked: dict[str, bool] = {}
    for (task, _), run in resolved.items():
        schedule = (run.plain("optim") or {}).get("scheduler")
        if not schedule:
            continue
        key = json.dumps(schedule, sort_keys=True, default=str)
        if key not in checked:
            longer = rates(schedule, PROBE_STEPS * cfg.budget_cap, PROBE_STEPS)
            checked[key] = rates(schedule, PROBE_STEPS, PROBE_STEPS) == longer
        if not checked[key]:
            raise ConfigError(
                f"budget_cap={cfg.budget_cap}: suite task {task}'s learning-rate schedule "
                f"({schedule.get('_target_')}, {_said(schedule)}) changes over a run's first budget when "
                "the budget grows (it decays towards the last step), so a continued run would not be one run "
                "of the longer budget; give the suite a schedule that continues (optim/scheduler=constant, "
                "as suite quick does), or budget_cap=1"
            )


def rates(schedule: dict[str, Any], total: int, steps: int) -> list[float]:
    """The learning rate of a run of `total` optimiser steps at each of its first `steps`, at a peak of 1."""
    import torch
    from hydra.utils import instantiate

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = instantiate(schedule, _convert_="all")(optimizer, total_steps=total)
    found = []
    for _ in range(steps):
        found.append(float(optimizer.param_groups[0]["lr"]))
        optimizer.step()
        scheduler.step()
    return found


def _said(schedule: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in schedule.items() if not k.startswith("_"))
