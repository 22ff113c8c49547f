"""What a compare runs: its arms (the mechanisms compared) and its jobs (a task, an arm, a seed, and what
the protocol chose for them: a learning rate from the search's records, or one point of MAD's
lr x weight-decay grid; widths: `attnx.compare.matching`), as plain data. The command
(`attnx.compare.cli`), its checks and its report all read these; none of them is imported back here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig

from attnx.report.runs import higher_is_better


@dataclass(frozen=True)
class Arm:
    """One mechanism of the comparison: its label in the report and the overrides that choose it."""

    label: str
    overrides: tuple[str, ...]
    candidate: bool = False

    def at(self, site: str | None) -> tuple[str, ...]:
        """The overrides that put this arm at a suite task's `site`: the run's `attention` and `score`
        when None, else that host's slot (`encoder/attention=NAME`, `encoder.attention.KEY=V`)."""
        if site is None:
            return self.overrides
        moved = []
        for override in self.overrides:
            key, value = override.split("=", 1)
            group, dot, field = key.partition(".")
            if group in SLOT_KINDS:
                key = f"{site}.{group}.{field}" if dot else f"{site}/{group}"
            moved.append(f"{key}={value}")
        return tuple(moved)


SLOT_KINDS = ("attention", "score")  # what an arm chooses, and what a host's slot takes


@dataclass(frozen=True)
class Job:
    """One run: a task, an arm, a seed, and what the protocol chose for it."""

    task: str
    arm: Arm
    seed: int
    lr: float | None = None
    widths: tuple[tuple[str, int], ...] = ()
    drawn: bool = False  # the seed whose attention maps the report shows (the suite's first)
    weight_decay: float | None = None  # a grid point's (protocol.grid)
    multiple: int = 1  # of the task's budget its run trains for (`attnx.compare.budget`: continuations)
    budget: tuple[tuple[str, int], ...] = ()  # the trainer's limits at that multiple, when it is above 1

    def overrides(self, task: DictConfig, search: bool = False) -> list[str]:
        """The run's overrides: the suite task's (`overrides`, its `site`), the arm's, what the protocol
        chose, and the curve whose convergence the run records: the validation twin of the task's metric,
        against the task's ceiling when the suite gives one (else the metric's natural one)."""
        chosen = [
            *task.overrides,
            *self.arm.at(task.get("site")),
            f"seed={self.seed}",
            "paired_embeddings=true",
            f"convergence.metric={val_twin(task.metric)}",
        ]
        if task.get("ceiling") is not None:
            chosen.append(f"convergence.ceiling={task.ceiling}")
        chosen += [f"{key}={value}" for key, value in self.widths]
        if self.lr is not None:
            chosen.append(f"optim.lr={self.lr}")
        if self.weight_decay is not None:
            chosen.append(f"{WEIGHT_DECAY}={self.weight_decay}")
        chosen += [f"{key}={value}" for key, value in self.budget]
        if search:  # validation is what chooses the rate: no test, no maps
            return [*chosen, "test=false", "callbacks.attention_heatmaps=null"]
        return [*chosen, *heatmap_overrides(self.drawn)]

    def at_multiple(self, multiple: int, base: Mapping[str, int]) -> Job:
        """This job trained for `multiple` times its `base` budget (the trainer's limits at 1×)."""
        scaled = tuple((key, value * multiple) for key, value in base.items()) if multiple > 1 else ()
        return replace(self, multiple=multiple, budget=scaled)


def heatmap_overrides(drawn: bool) -> list[str]:
    """The report shows the first seed's map of the first validation example, averaged over heads."""
    if not drawn:
        return ["callbacks.attention_heatmaps=null"]
    return ["callbacks.attention_heatmaps.num_examples=1", "callbacks.attention_heatmaps.heads=mean"]


WEIGHT_DECAY = "optim.optimizer.weight_decay"  # the run key a grid point sets (AdamW's and SGD's)


def final_jobs(cfg: DictConfig, hosted: dict[str, list[Arm]]) -> list[Job]:
    """Every hosted arm of every task over the seeds: the runs the report ranks. Under `protocol.grid`,
    each of them at every (lr, weight_decay) of the grid (MAD's protocol, Poli et al. 2024); the first
    point of the first seed draws the maps."""
    grid = cfg.protocol.grid
    points = (
        [(float(lr), float(wd)) for lr in grid.lr for wd in grid.weight_decay]
        if grid.enabled
        else [(None, None)]
    )
    return [
        Job(task, arm, seed, lr=lr, weight_decay=wd, drawn=seed == cfg.seeds[0] and i == 0)
        for task, task_arms in hosted.items()
        for arm in task_arms
        for seed in cfg.seeds
        for i, (lr, wd) in enumerate(points)
    ]


def search_jobs(cfg: DictConfig, hosted: dict[str, list[Arm]]) -> list[Job]:
    """Every hosted arm of every task at each rate of `protocol.lr_grid`, on the first seed."""
    return [
        Job(task, arm, cfg.seeds[0], lr=float(lr))
        for task, arms in hosted.items()
        for arm in arms
        for lr in cfg.protocol.lr_grid
    ]


def validation_metric(cfg: DictConfig, task: str) -> str:
    """The task's compared metric on validation: what chooses a learning rate."""
    return val_twin(cfg.tasks[task].metric)


def val_twin(metric: str) -> str:
    """A test metric's validation twin: `test/acc` and a test slice's `test@2x/acc` are both `val/acc`
    (validation is in distribution; a slice only tests beyond it)."""
    return re.sub(r"^test(@[^/]*)?/", "val/", str(metric))


def with_best_rates(jobs: list[Job], search: list[Job], folder: Path, cfg: DictConfig) -> list[Job]:
    """Each job at its (task, arm)'s best rate in `search` (job i in `folder/i`), by the validation twin
    of the task's metric in its declared direction; an arm none of whose searches completed keeps the
    configured rate."""
    from attnx.track.results import completed

    scores: dict[tuple[str, str], list[tuple[float, float]]] = {}
    done: dict[str, list[dict]] = {}  # task -> its completed searches, whose records declare the metric
    for i, job in enumerate(search):
        record = completed(folder / str(i))
        metric = validation_metric(cfg, job.task)
        if record and metric in record["metrics"] and job.lr is not None:
            scores.setdefault((job.task, job.arm.label), []).append((record["metrics"][metric], job.lr))
            done.setdefault(job.task, []).append(record)
    best = {}
    for (task, label), found in scores.items():
        pick = max if higher_is_better(done[task], validation_metric(cfg, task)) else min
        best[(task, label)] = pick(found)[1]
    return [replace(job, lr=best.get((job.task, job.arm.label))) for job in jobs]
