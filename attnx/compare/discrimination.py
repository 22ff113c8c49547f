"""Whether a suite task tells attention mechanisms apart at its budget: the rule a finished compare checks per
task (a task belongs in a shipped suite's calibrated set only if it passes; the others are context).

The rule looks only at the classic arms that **host attention**: those whose mechanism's context depends on
the query, as the mechanism declares it (`attnx.nn.attention.hosts_attention`: a placement other than
`none`, Sutskever's mean of the values, and `fixed_c`, Cho's one code for every step). A task that
separates a pooling failure from everything else says nothing about attention. For a task with ceiling c
(its suite `ceiling:`, else its metric's declared one) and those arms A, each with mean m_a over its seeds:

    (a) reached     some a in A that is settled (no run still improving) has  m_a >= ceiling_fraction * c
    (b) told apart  some pair a, b in A has a win/loss verdict (`attnx.report.verdicts`: the report's own,
                    the pair being context in a compare, Holm-adjusted with the other classic pairs of
                    the task) and |m_a - m_b| >= spread

(a) says the budget lets a known attention mechanism solve the task, so a candidate's shortfall is the
candidate's; (b) says the task separates attention mechanisms known to differ, by a difference that both
survives the adjustment and is large enough to matter, so a tie on it means something. The classic arms
alone decide: a task is not calibrated by the mechanism under test.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from omegaconf import DictConfig

from attnx.registry import Metric
from attnx.report.significance import Cells, convergence
from attnx.report.verdicts import Verdict, Verdicts


@dataclass(frozen=True)
class Discrimination:
    """One suite task under the rule: the figures behind each part, and whether it holds."""

    task: str
    ceiling: float
    bar: float  # ceiling_fraction * ceiling: what (a) asks of a settled attention arm
    top: tuple[str, float] | None  # the best settled classic attention arm, with its mean
    means: dict[str, float]  # every classic attention arm with a mean, best first
    pairs: list[Verdict]  # the verdicts between those arms, largest |Δ| first
    spread: float  # the smallest |Δ| (b) counts

    @property
    def reached(self) -> bool:
        return self.top is not None and self.top[1] >= self.bar

    @property
    def told_apart(self) -> list[Verdict]:
        """The pairs (b) counts: a win or a loss, by at least `spread`."""
        return [v for v in self.pairs if v.outcome in ("W", "L") and abs(v.result.mean) >= self.spread]

    @property
    def separates(self) -> bool:
        return bool(self.told_apart)

    @property
    def passes(self) -> bool:
        return self.reached and self.separates

    def failing(self) -> list[str]:
        """Each part that fails, with its figures."""
        found = []
        if self.top is None:
            found.append(f"(a) no classic attention arm is settled (needs mean >= {self.bar:.3f})")
        elif not self.reached:
            arm, mean = self.top
            found.append(
                f"(a) the best settled classic attention arm, {arm}, has {mean:.3f} < {self.bar:.3f}"
            )
        if not self.pairs:
            found.append("(b) fewer than two classic arms that host attention ran here")
        elif not self.separates:
            v = self.pairs[0]
            found.append(
                f"(b) no pair of attention arms told apart by >= {self.spread:g}: the widest, {v.a} − {v.b}, "
                f"Δ = {v.result.mean:+.3f}, {v.words}"
            )
        return found


def ceiling_of(task: DictConfig, declared: Metric | None) -> float:
    """A suite task's ceiling: its own, else its metric's declared one (`attnx.compare.checks` refuses a
    task that has neither)."""
    if task.get("ceiling") is not None:
        return float(task.ceiling)
    if declared is None or declared.ceiling is None:
        raise ValueError(f"suite task metric {task.metric} declares no ceiling and the task sets none")
    return float(declared.ceiling)


def discrimination(
    cfg: DictConfig,
    grouped: Cells,
    attending: Collection[str],
    verdicts: Verdicts,
    metric: str,
    declared: Metric | None,
) -> list[Discrimination]:
    """Each suite task of `cfg` under the rule, from the report's cells (rows: task, mechanism) on `metric`
    and its `verdicts`; only the classic arms in `attending` (those that host attention, the candidate
    never among them) count. `declared` is the metric's declaration (its ceiling)."""
    rule = cfg.discrimination
    found = []
    for task, spec in cfg.tasks.items():
        cell, rows = next(
            (
                (c, list(by.values()))
                for c, by in grouped.rows.items()
                if any(r.values[0] == task for r in by.values())
            ),
            ((), []),
        )
        arms = [row for row in rows if row.values[0] == task and row.values[1] in attending]
        scored = [(str(row.values[1]), mean, row) for row in arms if (mean := row.mean(metric)) is not None]
        scored.sort(key=lambda item: -item[1])
        settled = [(arm, mean) for arm, mean, row in scored if convergence(row).settled and row.runs]
        names = [arm for arm, _, _ in scored]
        pairs = [
            verdicts.of(cell, a, b) for i, a in enumerate(names) for b in names[i + 1 :]
        ]  # a is the better mean: Δ >= 0
        pairs.sort(key=lambda v: -abs(v.result.mean))
        ceiling = ceiling_of(spec, declared)
        found.append(
            Discrimination(
                str(task),
                ceiling,
                rule.ceiling_fraction * ceiling,
                settled[0] if settled else None,
                {arm: mean for arm, mean, _ in scored},
                pairs,
                float(rule.spread),
            )
        )
    return found
