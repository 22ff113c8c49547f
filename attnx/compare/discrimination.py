"""Whether a suite task can tell mechanisms apart at its budget: the rule a finished compare checks per task
(issue 24: a task belongs in a shipped suite only if it passes).

For a task with ceiling c (its suite `ceiling:`, else its metric's natural one,
`attnx.track.convergence.natural_ceiling`) and the classic arms A it hosts (`mechanisms`, never the
candidate), each with mean m_a over its seeds of the task's metric:

    (a) reached   some a in A whose runs all converged has  m_a >= ceiling_fraction * c
    (b) spread    max_{a in A} m_a - min_{a in A} m_a >= spread

(a) says the budget lets a known mechanism solve the task, so a candidate's shortfall is the candidate's;
(b) says the task separates mechanisms known to differ, so a tie means something. A task on which every
arm sits at the majority class, or every arm is at the ceiling, fails (b); one no arm learns within its
budget fails (a). The classic arms alone decide: a task is not calibrated by the mechanism under test.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from omegaconf import DictConfig

from attnx.report.runs import Row
from attnx.report.significance import convergence
from attnx.track.convergence import natural_ceiling


@dataclass(frozen=True)
class Discrimination:
    """One suite task under the rule: the figures behind each part, and whether it holds."""

    task: str
    ceiling: float
    bar: float  # ceiling_fraction * ceiling: what (a) asks of a converged classic arm
    top: tuple[str, float] | None  # the best classic arm whose runs all converged, with its mean
    means: dict[str, float]  # every classic arm with a mean, best first
    spread: float  # what (b) asks

    @property
    def reached(self) -> bool:
        return self.top is not None and self.top[1] >= self.bar

    @property
    def span(self) -> float | None:
        """Best − worst mean of the classic arms; None with fewer than two."""
        found = list(self.means.values())
        return found[0] - found[-1] if len(found) > 1 else None

    @property
    def separates(self) -> bool:
        return self.span is not None and self.span >= self.spread

    @property
    def passes(self) -> bool:
        return self.reached and self.separates

    def failing(self) -> list[str]:
        """Each part that fails, with its figures."""
        found = []
        if self.top is None:
            found.append(f"(a) no classic arm converged on every seed (needs mean >= {self.bar:.3f})")
        elif not self.reached:
            arm, mean = self.top
            found.append(f"(a) the best converged classic arm, {arm}, has {mean:.3f} < {self.bar:.3f}")
        if self.span is None:
            found.append("(b) fewer than two classic arms ran here")
        elif not self.separates:
            found.append(f"(b) best − worst = {self.span:.3f} < {self.spread:.3f}")
        return found


def ceiling_of(task: DictConfig) -> float:
    """A suite task's ceiling: its own, else its metric's natural one (`attnx.compare.checks` refuses a
    task that has neither)."""
    if task.get("ceiling") is not None:
        return float(task.ceiling)
    found = natural_ceiling(str(task.metric))
    if found is None:
        raise ValueError(f"suite task metric {task.metric} has no natural ceiling and the task sets none")
    return found


def discrimination(
    cfg: DictConfig, rows: Sequence[Row], classic: Collection[str], metric: str
) -> list[Discrimination]:
    """Each suite task of `cfg` under the rule, from `rows` (values: task, mechanism) on `metric`; only
    the arms in `classic` count."""
    rule = cfg.discrimination
    found = []
    for task, spec in cfg.tasks.items():
        arms = [row for row in rows if row.values[0] == task and row.values[1] in classic]
        scored = [(str(row.values[1]), mean, row) for row in arms if (mean := row.mean(metric)) is not None]
        scored.sort(key=lambda item: -item[1])
        settled = [(arm, mean) for arm, mean, row in scored if _all_converged(row)]
        ceiling = ceiling_of(spec)
        found.append(
            Discrimination(
                str(task),
                ceiling,
                rule.ceiling_fraction * ceiling,
                settled[0] if settled else None,
                {arm: mean for arm, mean, _ in scored},
                float(rule.spread),
            )
        )
    return found


def _all_converged(row: Row) -> bool:
    counted = convergence(row)
    return counted.runs > 0 and counted.converged == counted.runs
