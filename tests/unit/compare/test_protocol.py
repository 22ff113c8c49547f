"""compare's protocol keys: MAD's lr x weight-decay grid (its jobs, its checks, its scores: the point
chosen on validation, or MAD's best test over the grid, a capability the mean over its settings), arms at
another attention site, matching generalised to a measure (parameters or decoding state), and a suite
metric's direction and ceiling read from its declaration."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf

from attnx.compare.checks import _check_task, check_alone
from attnx.compare.keys import _check_protocol, _check_suite_tasks
from attnx.compare.matching import Matched, match_widths, state_of
from attnx.compare.plan import WEIGHT_DECAY, Arm, final_jobs
from attnx.compare.scores import capabilities, capability_scores, over_grid
from attnx.config.compose import CONF_DIR, ConfigError
from attnx.config.validation import check_convergence, check_monitors
from attnx.registry import Metric

PROTOCOL = {
    "lr_search": False,
    "lr_grid": [0.001],
    "match_params": False,
    "param_tolerance": 0.1,
    "match_state": False,
    "state_tolerance": 0.1,
    "grid": {"enabled": True, "lr": [0.0001, 0.001], "weight_decay": [0.0, 0.1], "select": "validation"},
}


def protocol(**changes: Any) -> DictConfig:
    cfg = OmegaConf.create(PROTOCOL)
    for key, value in changes.items():
        OmegaConf.update(cfg, key, value)
    return cfg


def test_every_run_trains_at_each_grid_point_and_only_the_first_draws_maps() -> None:
    cfg = OmegaConf.create({"seeds": [0, 1], "protocol": PROTOCOL})
    arms = [Arm("dot", ("attention=dot",)), Arm("multi_head", ("attention=multi_head",))]
    jobs = final_jobs(cfg, {"recall": arms})
    assert len(jobs) == 2 * 2 * 4  # arms x seeds x (lr x weight decay)
    points = {(j.lr, j.weight_decay) for j in jobs if j.arm.label == "dot" and j.seed == 1}
    assert points == {(0.0001, 0.0), (0.0001, 0.1), (0.001, 0.0), (0.001, 0.1)}
    assert [(j.seed, j.lr, j.weight_decay) for j in jobs if j.drawn and j.arm.label == "dot"] == [
        (0, 0.0001, 0.0)
    ]
    task = OmegaConf.create({"overrides": ["task=mqar"], "metric": "test/acc", "site": None})
    chosen = jobs[1].overrides(task)
    assert chosen[:2] == ["task=mqar", "attention=dot"]
    assert "optim.lr=0.0001" in chosen and f"{WEIGHT_DECAY}=0.1" in chosen
    cfg.protocol.grid.enabled = False
    assert [(j.lr, j.weight_decay) for j in final_jobs(cfg, {"recall": arms})] == [(None, None)] * 4


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"grid.lr": []}, "protocol.grid.lr is empty"),
        ({"grid.weight_decay": []}, "protocol.grid.weight_decay is empty"),
        ({"grid.lr": [0.001, 0.0]}, "protocol.grid.lr=[0.001, 0.0]: 0.0 is out of range (each must be > 0)"),
        ({"grid.lr": [float("nan")]}, "protocol.grid.lr=[nan]: nan is out of range"),
        (
            {"grid.weight_decay": [-0.1]},
            "protocol.grid.weight_decay=[-0.1]: -0.1 is out of range (each must be >= 0)",
        ),
        ({"grid.weight_decay": [0.1, 0.1]}, "protocol.grid.weight_decay=[0.1, 0.1]: 0.1 is repeated"),
        ({"grid.select": "best"}, "protocol.grid.select=best: must be one of validation, test"),
        ({"state_tolerance": -0.5}, "protocol.state_tolerance=-0.5: must be >= 0"),
        (
            {"lr_search": True},
            "protocol.lr_search=true and protocol.grid.enabled=true both choose the learning rate",
        ),
        (
            {"match_params": True, "match_state": True},
            "protocol.match_params=true and protocol.match_state=true",
        ),
    ],
)
def test_a_bad_protocol_is_one_line_naming_the_key(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as error:
        _check_protocol(protocol(**changes))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_an_arm_at_the_encoder_site_fills_the_encoder_slot() -> None:
    arm = Arm("dot+cosine", ("attention=dot", "attention.dropout=0.1", "score=cosine", "score.temperature=2"))
    assert arm.at(None) == arm.overrides
    assert arm.at("encoder") == (
        "encoder/attention=dot",
        "encoder.attention.dropout=0.1",
        "encoder/score=cosine",
        "encoder.score.temperature=2",
    )


def run(
    task: str, mechanism: str, seed: int, score: float | None, lr: float = 0.001, val: float | None = None
) -> dict[str, Any]:
    """A labelled run whose validation twin is `val` (its test `score` unless told)."""
    labels = {"task": task, "mechanism": mechanism, "seed": seed, "optim.lr": lr, WEIGHT_DECAY: 0.0}
    metrics = {} if score is None else {"test/metric": score, "val/metric": score if val is None else val}
    return {"status": "completed" if score is not None else "failed", "labels": labels, "metrics": metrics}


def test_each_run_is_read_at_the_point_validation_chose_and_mad_s_rule_only_when_asked() -> None:
    runs = [
        run("recall", "dot", 0, 0.9, lr=0.0001, val=0.5),  # the best test, chosen by no validation
        run("recall", "dot", 0, 0.6, lr=0.001, val=0.7),  # the best validation: its test is what counts
        run("recall", "dot", 1, 0.4, lr=0.0001, val=0.7),
        run("recall", "dot", 1, 0.8, lr=0.001, val=0.7),  # a tie on validation: the first point wins
    ]
    chosen = over_grid(runs, "validation")
    assert [r["metrics"]["test/metric"] for r in chosen] == [0.6, 0.4]
    assert [r["metrics"]["test/metric"] for r in over_grid(runs, "test")] == [0.9, 0.8]  # optimistic


def test_a_run_scores_its_best_over_the_grid_and_a_capability_the_mean_of_its_settings() -> None:
    runs = [
        run("recall_short", "dot", 0, 0.4, lr=0.0001),
        run("recall_short", "dot", 0, 0.8, lr=0.001),  # the best of the grid for (short, dot, 0)
        run("recall_long", "dot", 0, 0.2),
        run("recall_long", "dot", 0, None, lr=0.0001),  # failed: no score, not a zero
        run("recall_short", "dot", 1, 0.6),
        run("recall_long", "dot", 1, 0.4),
        run("recall_short", "none", 0, 0.9),  # none cannot run recall_long: no capability score
        run("copy", "dot", 0, 0.5),
    ]
    best = over_grid(runs, "validation")
    assert len(best) == 6 and runs[1] in best and runs[0] not in best
    tasks = OmegaConf.create(
        {
            "recall_short": {"capability": "recall"},
            "recall_long": {"capability": "recall"},
            "copy": {"capability": None},
        }
    )
    assert capabilities(tasks) == {"recall": ["recall_short", "recall_long"], "copy": ["copy"]}
    scores = capability_scores(best, tasks, "test/metric")
    assert scores["recall"]["dot"] == pytest.approx({0: 0.5, 1: 0.5})  # (0.8 + 0.2) / 2, (0.6 + 0.4) / 2
    assert "none" not in scores["recall"] and scores["copy"] == {"dot": {0: 0.5}}


def test_matching_scales_widths_until_the_measure_meets_the_baseline_and_says_what_has_none() -> None:
    """A state-like measure: the baseline's grows as 2·n·D (a KV cache), the candidate's as D² (linear
    attention's per-head matrix), another declares none."""
    n = 64
    growth = {"kv": lambda d: 2 * n * d, "linear": lambda d: d * d, "undeclared": lambda d: None}

    def measure(run: SimpleNamespace, task: object, widths: dict[str, int]) -> int | None:
        return growth[run.kind](widths["lm.d_model"])

    configs = {k: SimpleNamespace(kind=k, sections={"lm": {"d_model": 32}}) for k in growth}

    class Task:
        def setup(self) -> None: ...

    found = match_widths(configs, Task(), ["lm.d_model"], "kv", 0.1, measure)
    assert found["kv"] == Matched(4096, 4096, (("lm.d_model", 32),), True)
    assert found["linear"].widths == (("lm.d_model", 64),) and found["linear"].within  # 64² = 2·64·32
    assert found["undeclared"] == Matched(None, 4096, (("lm.d_model", 32),), False)
    with pytest.raises(LookupError, match="the baseline undeclared declares no decoding state"):
        match_widths(configs, Task(), ["lm.d_model"], "undeclared", 0.1, measure)


def test_a_model_without_state_size_has_no_state() -> None:
    class Decoding:
        def state_size(self, n: int) -> int:
            return 2 * n * 8

    assert state_of(Decoding(), 10) == 160
    assert state_of(object(), 10) is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"site": "decoderr"}, "suite task recall: site=decoderr: must be null or one of encoder, decoder"),
        ({"capability": " "}, "suite task recall: capability is empty; name it, or null for the task's own"),
    ],
)
def test_a_bad_suite_task_key_is_one_line_naming_the_task_and_key(
    changes: dict[str, Any], message: str
) -> None:
    task = {"overrides": ["task=mqar"], "metric": "test/acc", "capability": None, "site": None, **changes}
    cfg = OmegaConf.create({"tasks": {"recall": task}, "protocol": PROTOCOL})
    with pytest.raises(ConfigError, match="^" + re.escape(message) + "$"):
        _check_suite_tasks(cfg)


@pytest.mark.parametrize(
    ("given", "needs"),
    [
        ("protocol.lr_grid=[0.1]", "protocol.lr_search=true"),
        ("protocol.grid.lr=[0.1]", "protocol.grid.enabled=true"),
        ("protocol.grid.weight_decay=[0.0]", "protocol.grid.enabled=true"),
        ("protocol.grid.select=test", "protocol.grid.enabled=true"),
        ("protocol.param_tolerance=0.2", "protocol.match_params=true"),
        ("protocol.state_tolerance=0.2", "protocol.match_state=true"),
    ],
)
def test_a_protocol_key_acts_only_with_the_switch_it_tunes(given: str, needs: str) -> None:
    switch = needs.removeprefix("protocol.").removesuffix("=true")
    off = OmegaConf.create({"protocol": protocol(**{"grid.enabled": False})})
    with pytest.raises(ConfigError, match=re.escape(f"give {needs} too")):
        check_alone(off, [given], ["attention=local_window"])
    on = OmegaConf.create({"protocol": protocol(**{"grid.enabled": False, switch: True})})
    check_alone(
        on, [given], ["attention=local_window"]
    )  # a suite may set the switch too: the composed one counts


def test_score_host_acts_only_for_a_candidate_score_alone() -> None:
    cfg = OmegaConf.create({"protocol": protocol()})
    check_alone(cfg, ["score_host=additive"], ["score=cosine", "score.temperature=0.1"])
    for candidate in (["attention=local_window"], ["attention=dot", "score=cosine"]):
        with pytest.raises(ConfigError, match="score_host is the mechanism a candidate score runs in"):
            check_alone(cfg, ["score_host=additive"], candidate)


class Resolved:
    """What `_check_task` reads of a resolved run: its task, readers, metrics and their declarations."""

    readers = ()
    model_type = SimpleNamespace(decodes=False)

    def __init__(self, **metrics: Metric) -> None:
        self.metrics = metrics

    def __getitem__(self, key: str) -> Any:
        return {"name": "bleu_task"}

    def logged(self, stage: str) -> list[str]:
        return sorted(self.metrics)


@pytest.mark.parametrize(
    ("declared", "ceiling", "message"),
    [
        (Metric("score", higher_is_better=False), None, "metric test/score: a suite's metric must rise"),
        (Metric("score"), None, "no ceiling; metric test/score declares none: set ceiling:"),
        (Metric("score"), 40.0, None),  # the suite's own ceiling is enough
        (Metric("score", ceiling=1.0), None, None),
    ],
)
def test_a_suite_metric_s_direction_and_ceiling_come_from_its_declaration(
    declared: Metric, ceiling: float | None, message: str | None
) -> None:
    spec = OmegaConf.create({"metric": "test/score", "ceiling": ceiling, "width": "???"})
    if message is None:
        assert _check_task(spec, [Resolved(**{"test/score": declared})], False) is False
        return
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        _check_task(spec, [Resolved(**{"test/score": declared})], False)


def test_every_choice_inside_a_run_is_made_on_validation() -> None:
    """The best checkpoint (what test evaluates), `stop_at`'s early stop and the convergence stop monitor a
    metric validation logs: a test metric there is refused before anything trains, so no run of a compare
    chooses on test (the learning-rate search runs with test=false; the grid: `over_grid`)."""
    share = Metric("acc", ceiling=1.0, proportion=True)
    metrics = {"val/acc": share, "test/acc": share}
    for callback in ("model_checkpoint", "stop_at"):
        cfg = OmegaConf.create({"callbacks": {callback: {"monitor": "test/acc"}}})
        with pytest.raises(ConfigError, match=f"callbacks.{callback}.monitor=test/acc: task t logs no such"):
            check_monitors(cfg, metrics, "t")
    kind = SimpleNamespace(headline="acc")
    with pytest.raises(ConfigError, match="convergence.metric=test/acc: task t logs no such metric"):
        check_convergence({"metric": "test/acc", "ceiling": None, "tolerance": 0.005}, metrics, kind, "t")
    default = OmegaConf.load(Path(CONF_DIR) / "callbacks" / "default.yaml")
    assert default.model_checkpoint.monitor == "val/loss"  # test evaluates the best checkpoint on validation
