"""The discrimination rule on a finished compare's rows: a task passes when a classic arm whose runs all
converged reaches ceiling_fraction of the ceiling and the classic arms' means span the spread; each
failing part says so with its figures. Also compare's seeds (a count or a list) and each run's
convergence overrides."""

from __future__ import annotations

import re
from typing import Any

import pytest
from omegaconf import OmegaConf

from attnx.compare.checks import seed_list
from attnx.compare.discrimination import discrimination
from attnx.compare.plan import Arm, Job, val_twin
from attnx.config.compose import ConfigError
from attnx.report.runs import Row


def row(task: str, arm: str, scores: list[float], converged: bool | None = True) -> Row:
    runs = [{"metrics": {"test/metric": s}, "convergence": {"converged": converged}} for s in scores]
    return Row((task, arm), runs)


def cfg(**task: Any) -> Any:
    spec = {"metric": "test/acc", "overrides": ["task=mqar"], **task}
    rule = {"ceiling_fraction": 0.95, "spread": 0.10}
    return OmegaConf.create({"tasks": {"t": spec}, "discrimination": rule})


CLASSIC = {"additive", "dot", "none"}


def test_a_task_passes_when_a_converged_classic_arm_nears_the_ceiling_and_the_arms_spread() -> None:
    rows = [row("t", "dot", [0.96, 0.98]), row("t", "none", [0.3, 0.4]), row("t", "linear", [0.1, 0.1])]
    (found,) = discrimination(cfg(), rows, CLASSIC, "test/metric")
    assert found.passes and found.top == ("dot", pytest.approx(0.97)) and found.bar == pytest.approx(0.95)
    assert found.span == pytest.approx(0.62)  # the candidate (linear, 0.1) does not count
    assert found.failing() == []


def test_each_failing_part_names_its_figures() -> None:
    # the best arm is still improving on one seed, the converged one falls short of 0.95 x 0.8 = 0.76
    rows = [row("t", "dot", [0.8, 0.8], converged=False), row("t", "additive", [0.6, 0.62])]
    (found,) = discrimination(cfg(ceiling=0.8), rows, CLASSIC, "test/metric")
    assert not found.reached and found.separates
    assert found.failing() == ["(a) the best converged classic arm, additive, has 0.610 < 0.760"]
    rows = [row("t", "dot", [0.35, 0.36], None), row("t", "none", [0.34, 0.35], None)]  # no verdicts
    (found,) = discrimination(cfg(), rows, CLASSIC, "test/metric")
    assert found.failing() == [
        "(a) no classic arm converged on every seed (needs mean >= 0.950)",
        "(b) best − worst = 0.010 < 0.100",
    ]
    (alone,) = discrimination(cfg(), [row("t", "dot", [1.0])], CLASSIC, "test/metric")
    assert alone.reached and alone.failing() == ["(b) fewer than two classic arms ran here"]


def test_seeds_are_a_count_or_a_list_of_distinct_seeds() -> None:
    assert seed_list(3) == [0, 1, 2] and seed_list([5, 1]) == [5, 1] and seed_list(64) == list(range(64))
    for given, message in [
        (0, "seeds=0: a count must be within 1..64"),
        (65, "seeds=65: a count must be within 1..64"),
        ([0, 2**32], "seeds=[0, 4294967296]: 4294967296 is no seed (each an integer in [0, 2**32))"),
        ([-1], "seeds=[-1]: -1 is no seed"),
        ([1, 1], "seeds=[1, 1]: 1 is repeated"),
        ([], "seeds is empty"),
        (True, "seeds=True: give a count"),
    ]:
        with pytest.raises(ConfigError, match="^" + re.escape(message)):
            seed_list(given)


def test_each_run_records_convergence_on_its_task_metrics_validation_twin() -> None:
    assert val_twin("test/acc") == "val/acc" and val_twin("test@2x/exact_match") == "val/exact_match"
    job = Job("t", Arm("dot", ("attention=dot",)), 0)
    task = OmegaConf.create({"overrides": ["task=bleu_task"], "metric": "test/bleu", "ceiling": 40.0})
    chosen = job.overrides(task)
    assert "convergence.metric=val/bleu" in chosen and "convergence.ceiling=40.0" in chosen
    task.ceiling = None  # the metric's natural ceiling: train's own default, so nothing to set
    assert not any(o.startswith("convergence.ceiling=") for o in job.overrides(task))
