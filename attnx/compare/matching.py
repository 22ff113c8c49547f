"""Parameter matching, the Long Range Arena's rule for comparing mechanisms: scale each model's width
until its parameter count is within a tolerance of the baseline's, so that a mechanism does not win
by being bigger. Counts are of the model `attnx train` would build (`AttnxModule`), never estimated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from omegaconf import DictConfig, OmegaConf

from attnx import registry
from attnx.compare.plan import Arm, Job
from attnx.config.compose import compose

MAX_SCALE = 8  # widths are searched between 1 and MAX_SCALE times their configured value


@dataclass(frozen=True)
class Matched:
    """An arm's widths on a task: its parameter count at them and the baseline's."""

    params: int
    target: int
    widths: tuple[tuple[str, int], ...]  # (key, value), the task's width keys
    within: bool  # |params - target| <= tolerance · target

    @property
    def ratio(self) -> float:
        return self.params / self.target


def with_matched_widths(
    jobs: list[Job], cfg: DictConfig, runs: list[str]
) -> tuple[list[Job], dict[tuple[str, str], Matched]]:
    """Each job with its arm's matched widths for its task, and what matching found per (task, arm)."""
    matched: dict[tuple[str, str], Matched] = {}
    for task, spec in cfg.tasks.items():
        arms = list(dict.fromkeys(job.arm for job in jobs if job.task == task))
        baseline = next((arm for arm in arms if arm.label == cfg.baseline), arms[0])
        found = match_widths(
            list(spec.overrides), list(spec.width), arms, baseline, cfg.protocol.param_tolerance, runs
        )
        matched.update({(task, label): m for label, m in found.items()})
    return [replace(job, widths=matched[(job.task, job.arm.label)].widths) for job in jobs], matched


def match_widths(
    task_overrides: list[str],
    keys: Sequence[str],
    arms: Sequence[Arm],
    baseline: Arm,
    tolerance: float,
    runs: Sequence[str] = (),
) -> dict[str, Matched]:
    """Per arm label, the widths (`keys`, scaled together from their configured values) whose count is
    closest to the baseline's at its configured widths; the baseline keeps its own."""
    if not keys:
        raise ValueError("protocol.match_params needs the task's width keys (its `width:` list)")
    configs = {arm.label: compose([*task_overrides, *arm.overrides, *runs]) for arm in arms}
    base_cfg = configs[baseline.label]
    task = registry.build("task", base_cfg.task)
    task.setup()  # the vocabularies: what the embedding and output sizes follow
    defaults = [int(OmegaConf.select(base_cfg, key)) for key in keys]
    target = count(base_cfg, task, dict(zip(keys, defaults)))
    found = {}
    for arm in arms:
        widths = _closest(configs[arm.label], task, keys, defaults, target)
        params = count(configs[arm.label], task, widths)
        found[arm.label] = Matched(
            params, target, tuple(widths.items()), abs(params - target) <= tolerance * target
        )
    return found


def count(cfg: DictConfig, task: Any, widths: dict[str, int]) -> int:
    """The parameter count of `cfg`'s model at `widths`; ValueError when the model cannot be built there
    (a width the heads do not divide)."""
    from attnx.lit import lit_module
    from attnx.train.assemble import model_spec

    cfg = cfg.copy()
    for key, value in widths.items():
        OmegaConf.update(cfg, key, value)
    return int(lit_module(model_spec(cfg, task)).num_parameters())


def _closest(
    cfg: DictConfig, task: Any, keys: Sequence[str], defaults: list[int], target: int
) -> dict[str, int]:
    """Bisect the first key's width (the others scaled with it) for the count nearest `target`; widths
    the model cannot be built at are stepped over."""

    def widths(first: int) -> dict[str, int]:
        return {k: max(1, round(d * first / defaults[0])) for k, d in zip(keys, defaults)}

    def params(first: int) -> int | None:
        try:
            return count(cfg, task, widths(first))
        except ValueError:
            return None

    low, high = 1, MAX_SCALE * defaults[0]
    while high - low > 1:  # the count grows with the width: the first width at or above target
        middle = (low + high) // 2
        found = next((p for p in (params(m) for m in range(middle, high)) if p is not None), None)
        if found is not None and found >= target:
            high = middle
        else:
            low = middle
    scored = [(abs(p - target), w) for w in range(max(1, low - 4), high + 5) if (p := params(w)) is not None]
    return widths(min(scored)[1])
