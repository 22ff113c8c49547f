"""`attnx compare ... plan=true` (or `--plan`): what the compare would run, and nothing trained. Per task, its
arms and seeds; the runs the run store already holds (each job's config composed as its job will compose it,
then keyed: `attnx.store.key`) and those left to train; and an estimate of the time, from the wall time of
the stored runs of the same task (none stored: no estimate).

The key is computed on this machine: a launcher that runs the jobs on other machines (SLURM) keys them by
theirs, so what this preview finds in the store is what a local launch would find. Under
`protocol.lr_search` the final runs' rates are the search's to choose: they are counted at the configured
rate, so a stored final run may be counted as one to train.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from attnx.compare.plan import Job
from attnx.compare.progress import clock
from attnx.config.compose import CONF_DIR, compose
from attnx.config.session import session
from attnx.table import markdown_table


def preview(cfg: DictConfig, jobs: list[Job], search: list[Job], runs: list[str], root: Path | None) -> str:
    """The plan as text: one row per (task, arm), then the totals."""
    from attnx.store.key import run_key
    from attnx.store.runs import Store

    phases = [("lr_search", job, True) for job in search] + [("runs", job, False) for job in jobs]
    found: dict[tuple[str, str], list[int]] = {}  # (task, arm) -> [runs, stored]
    seconds: dict[str, list[float]] = {}  # task -> wall seconds of its stored runs
    store = None if root is None else Store(root)
    with session(CONF_DIR):
        for _, job, searching in phases:
            counts = found.setdefault((job.task, job.arm.label), [0, 0])
            counts[0] += 1
            if store is None:
                continue
            record = store.record(run_key(compose([*runs, *job.overrides(cfg.tasks[job.task], searching)])))
            if record is not None:
                counts[1] += 1
                wall = record.get("wall_seconds") or record.get("train_seconds") or 0.0
                seconds.setdefault(job.task, []).append(float(wall))
    body = []
    left = 0.0
    unknown = False
    for (task, label), (total, stored) in found.items():
        seeds = sorted({job.seed for job in jobs if (job.task, job.arm.label) == (task, label)})
        body.append([task, label, ",".join(map(str, seeds)), str(total), str(stored), str(total - stored)])
        if total > stored and task not in seconds:
            unknown = True
        elif total > stored:
            left += (total - stored) * sum(seconds[task]) / len(seconds[task])
    total, stored = sum(c[0] for c in found.values()), sum(c[1] for c in found.values())
    where = "no run store (store=null)" if root is None else f"the run store at {root}"
    estimate = "no estimate (the store holds no run of these tasks to time)" if unknown else f"~{clock(left)}"
    table = markdown_table(["task", "arm", "seeds", "runs", "in the store", "to train"], body, right_from=3)
    return "\n".join(
        [
            table,
            "",
            f"{total} runs ({len(search)} of them the learning-rate search): {stored} found in {where}, "
            f"{total - stored} to train; one at a time: {estimate}.{_continued(cfg)} Nothing was trained "
            "(plan=true).",
        ]
    )


def _continued(cfg: DictConfig) -> str:
    """What the counts leave out under `budget_cap` (attnx.compare.budget): continuations, which depend on
    curves not yet trained."""
    if cfg.budget_cap <= 1:
        return ""
    return (
        " Runs still improving at the end of their budget are then continued, a budget at a time, up to "
        f"{cfg.budget_cap} budgets (budget_cap): not counted here."
    )
