"""`Convergence`'s stopping criterion (attnx.lit.convergence): the rule on the curve so far, from
`min_validations` validations on (the ceiling at once), and never without `stop`."""

from __future__ import annotations

import torch
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason

from attnx.lit.convergence import Convergence


def judge(values: list[float], stop: bool = True, metric: str = "val/acc") -> Convergence:
    """A share (acc: higher is better, ceiling 1) or a loss (lower is better, no ceiling), as declared."""
    share = metric != "val/loss"
    ceiling = 1.0 if share else None
    callback = Convergence(metric, 0.005, ceiling, higher_is_better=share, min_validations=4, stop=stop)
    callback.curve = {metric: [[10 * (i + 1), v] for i, v in enumerate(values)]}
    return callback


def stops(callback: Convergence) -> bool:
    return callback._evaluate_stopping_criteria(torch.tensor(0.0))[0]


def test_the_ceiling_stops_at_once_a_plateau_only_from_min_validations_on() -> None:
    early = judge([0.5, 1.0])
    assert early.verdict()["converged"] is True and stops(early)
    assert early.stopping_reason == EarlyStoppingReason.STOPPING_THRESHOLD
    chance = judge([0.5, 0.5, 0.5])  # a plateau at chance before learning: too early to call
    assert chance.verdict()["converged"] is None and not stops(chance)
    assert stops(judge([0.5, 0.5, 0.5, 0.5]))


def test_a_plateau_stops_a_rising_curve_does_not() -> None:
    flat = judge([0.2, 0.6, 0.58, *[0.62, 0.6, 0.58] * 3])  # scatter 0.04, windows of 3: mean 0.6 each
    assert stops(flat) and flat.stopping_reason == EarlyStoppingReason.PATIENCE_EXHAUSTED
    assert not stops(judge([0.1 * i for i in range(8)]))


def test_without_stop_it_only_judges() -> None:
    assert not stops(judge([0.5, 1.0, 1.0, 1.0], stop=False))


def test_a_loss_is_judged_falling_and_the_curve_is_its_state() -> None:
    callback = judge([2.0 - 0.1 * i for i in range(8)], metric="val/loss")
    assert callback.mode == "min" and callback.ceiling is None and not stops(callback)
    restored = judge([], metric="val/loss")
    callback.examples = 300  # read from the validation loader after a validation; a resumed run keeps it
    restored.load_state_dict(callback.state_dict())
    assert restored.curve == callback.curve and restored.examples == 300


def test_a_proportion_s_noise_is_its_validation_split_s_binomial_error_from_the_first_validations() -> None:
    """Seven validations at chance on 300 examples: the last one's rise, 0.06, is within the noise of a
    share of 300 examples (binomial error 0.029, margin 0.08), not progress; judged by the curve's own
    scatter alone (a metric that is no proportion) it would be still improving."""
    callback = judge([0.5] * 6 + [0.56])
    callback.proportion, callback.examples = True, 300
    verdict = callback.verdict()
    assert verdict["noise_source"] == "binomial" and verdict["examples"] == 300
    assert verdict["converged"] is True and stops(callback)
    callback.proportion = False
    assert callback.verdict()["converged"] is False and callback.verdict()["examples"] is None
