"""The discrimination rule on a finished compare's rows: a task passes when a settled classic arm that hosts
attention reaches ceiling_fraction of the ceiling and two such arms are told apart (a win or a loss of the
report's own verdicts, by at least the spread); arms without attention (none, fixed_c: declared by their
placement) never count, and each failing part says so with its figures. Also compare's seeds (a count or
a list) and each run's convergence overrides."""

from __future__ import annotations

import re
from typing import Any

import pytest
from omegaconf import OmegaConf

from attnx.compare.discrimination import discrimination
from attnx.compare.keys import seed_list
from attnx.compare.plan import Arm, Job, val_twin
from attnx.config.compose import ConfigError
from attnx.nn.attention import hosts_attention
from attnx.registry import Metric, get
from attnx.report.runs import Row
from attnx.report.significance import cells
from attnx.report.verdicts import Procedure, decide

SEEDS = range(10)
SHARE = Metric("acc", ceiling=1.0)


def row(task: str, arm: str, mean: float, converged: bool | None = True, scatter: float = 0.002) -> Row:
    """10 seeds around `mean`, the same small zig-zag for every arm (paired seeds differ by the means)."""
    runs = [
        {
            "config": {"seed": s},
            "metrics": {"test/metric": mean + scatter * ((s % 3) - 1) + 0.0001 * s},
            "convergence": {"converged": converged},
        }
        for s in SEEDS
    ]
    return Row((task, arm), runs)


def cfg(**task: Any) -> Any:
    spec = {"metric": "test/acc", "overrides": ["task=mqar"], **task}
    rule = {"ceiling_fraction": 0.95, "spread": 0.05}
    return OmegaConf.create({"tasks": {"t": spec, "u": spec}, "discrimination": rule})


ATTENDING = {"additive", "dot", "multi_head"}  # the classic arms that host attention (none, fixed_c do not)


def judged(rows: list[Row], **task: Any) -> dict[str, Any]:
    """Each task's figures under the rule, with the verdicts the report would print (candidate: linear)."""
    grouped = cells(rows, ["task", "mechanism"], "mechanism")
    focus = {c: "linear" for c in grouped.rows}
    verdicts = decide(grouped, "test/metric", True, Procedure(), focus)
    found = discrimination(cfg(**task), grouped, ATTENDING, verdicts, "test/metric", SHARE)
    return {d.task: d for d in found}


def test_none_and_fixed_c_host_no_attention_by_their_declared_placement() -> None:
    assert not hosts_attention(get("attention", "none")) and not hosts_attention(get("attention", "fixed_c"))
    assert all(hosts_attention(get("attention", name)) for name in ("additive", "dot", "multi_head"))


def test_a_task_passes_when_attention_arms_are_told_apart_not_when_only_a_pooling_failure_is() -> None:
    rows = [
        # t: the attention arms differ (additive 0.97, dot 0.90 at every seed); u: only fixed_c is off
        row("t", "additive", 0.97),
        row("t", "dot", 0.90),
        row("t", "fixed_c", 0.30),
        row("t", "linear", 0.1),
        row("u", "additive", 0.998),
        row("u", "dot", 0.996),
        row("u", "multi_head", 0.997),
        row("u", "fixed_c", 0.77),
        row("u", "linear", 0.5),
    ]
    found = judged(rows)
    t, u = found["t"], found["u"]
    assert t.passes and t.top == ("additive", pytest.approx(0.97, abs=1e-3)) and t.bar == pytest.approx(0.95)
    (pair,) = t.told_apart
    assert (pair.a, pair.b, pair.outcome) == ("additive", "dot", "W") and pair.result.mean == pytest.approx(
        0.07
    )
    assert pair.family == "context"  # classic against classic: outside the candidate's family
    assert set(t.means) == {"additive", "dot"}  # neither fixed_c (no attention) nor the candidate counts
    assert u.reached and not u.passes  # 0.22 from fixed_c once passed (b); attention arms are 0.002 apart
    (why,) = u.failing()
    assert why.startswith("(b) no pair of attention arms told apart by >= 0.05: the widest, additive − dot")


def test_each_failing_part_names_its_figures() -> None:
    # the best arm is still improving, the settled one falls short of 0.95 x 0.8 = 0.76
    rows = [row("t", "dot", 0.8, converged=False), row("t", "additive", 0.6), row("u", "dot", 1.0)]
    t, u = judged(rows, ceiling=0.8).values()
    assert not t.reached and t.separates is False  # a side still improving: NC, never told apart
    assert t.failing()[0] == "(a) the best settled classic attention arm, additive, has 0.600 < 0.760"
    assert "not converged: raise the budget" in t.failing()[1]
    assert u.reached and u.failing() == ["(b) fewer than two classic arms that host attention ran here"]
    rows = [row("t", "dot", 0.35, False), row("t", "additive", 0.34, False), row("u", "dot", 0.5)]
    assert judged(rows)["t"].failing()[0] == "(a) no classic attention arm is settled (needs mean >= 0.950)"
    # runs without a verdict are settled: the one definition the verdicts use too
    assert judged([row("t", "dot", 0.97, None), row("u", "dot", 0.5)])["t"].reached


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
