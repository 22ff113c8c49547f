"""The convergence rule (attnx.track.convergence) on synthetic validation curves."""

from __future__ import annotations

import random

import pytest

from attnx.track.convergence import convergence, lower_is_better, natural_ceiling

TOL = 0.005


def curve(values: list[float]) -> list[tuple[int, float]]:
    return [(100 * (i + 1), v) for i, v in enumerate(values)]


def verdict(values: list[float], ceiling: float | None = None, **kwargs: object) -> dict:
    return convergence(curve(values), TOL, ceiling, **kwargs)  # type: ignore[arg-type]


def test_a_plateau_converged() -> None:
    out = verdict([0.3, 0.5, 0.6, 0.65, 0.68, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7])
    assert out["converged"] is True and out["reason"] == "plateaued"
    assert out["validations"] == 12 and out["improvement"] == pytest.approx(0.0)


def test_still_rising_is_not_converged() -> None:
    out = verdict([0.1 + 0.02 * i for i in range(12)])
    assert out["converged"] is False and out["reason"] == "still improving"
    assert out["improvement"] == pytest.approx(0.06)  # q = 3: three steps of 0.02 between the windows


def test_a_noisy_flat_curve_converged_by_the_windowed_mean() -> None:
    # the last two validations alone differ by 0.04, eight times the tolerance; the windows' means by 0
    values = [0.6 + (0.02 if i % 2 else -0.02) for i in range(16)]
    out = verdict(values)
    assert abs(values[-1] - values[-2]) > TOL
    assert out["converged"] is True and out["improvement"] == pytest.approx(0.0, abs=1e-12)


def test_a_noisy_rising_curve_is_not_converged() -> None:
    """0.02 a validation under noise of 0.02: the windows' difference, 4 steps, is well beyond the margin."""
    draw = random.Random(0)
    out = verdict([0.2 + 0.02 * i + draw.gauss(0, 0.02) for i in range(16)])
    assert out["converged"] is False and out["improvement"] > TOL + out["margin"] > TOL


def test_a_curve_flat_at_chance_under_validation_noise_converged_by_the_margin() -> None:
    """A binary task's accuracy at chance on 300 validation examples scatters by 0.029: the windows'
    means differ by more than the tolerance by noise alone, but not by more than their noise."""
    draw = random.Random(0)
    values = [0.5 + draw.gauss(0, 0.029) for _ in range(32)]
    out = verdict(values)
    assert out["converged"] is True and out["margin"] > TOL
    bare = [0.5 + 0.003 * (-1) ** i for i in range(32)]  # little scatter: a small margin
    assert verdict(bare)["margin"] < 0.01


def test_reaching_the_ceiling_converged_even_while_the_last_quarter_still_moves() -> None:
    out = verdict([0.5, 0.8, 0.999, 0.9, 0.95, 0.97, 0.99, 0.999], ceiling=1.0)
    assert out["converged"] is True and out["reason"] == "reached the ceiling"
    assert out["ceiling"] == 1.0
    # the same curve without a ceiling: the plateau rule alone says still improving
    assert verdict([0.5, 0.8, 0.999, 0.9, 0.95, 0.97, 0.99, 0.999])["converged"] is False


def test_reaching_the_ceiling_early_then_flat_converged_before_min_validations() -> None:
    assert verdict([0.6, 1.0], ceiling=1.0)["reason"] == "reached the ceiling"
    out = verdict([0.6, 1.0, 1.0, 1.0, 1.0, 1.0], ceiling=1.0)
    assert out["converged"] is True and out["reason"] == "reached the ceiling"


def test_too_few_validations_has_no_verdict() -> None:
    out = verdict([0.1, 0.2, 0.2])
    assert out["converged"] is None and out["reason"] == "too few validations (k < 4)"
    assert verdict([])["improvement"] is None
    assert verdict([0.2, 0.2], min_validations=2)["converged"] is True


def test_lower_is_better_flips_the_sign() -> None:
    falling = [2.0 - 0.1 * i for i in range(12)]
    out = verdict(falling, higher_is_better=False, metric="val/loss")
    assert out["converged"] is False and out["improvement"] == pytest.approx(0.3)
    assert out["metric"] == "val/loss"
    assert verdict([1.0] * 8, higher_is_better=False)["converged"] is True
    assert verdict([0.5, 0.1, 0.001, 0.3], ceiling=0.0, higher_is_better=False)["converged"] is True


def test_metric_directions_and_ceilings() -> None:
    assert lower_is_better("val/loss") and lower_is_better("test/wer") and not lower_is_better("val/acc")
    assert natural_ceiling("val/exact_match") == natural_ceiling("val/f1") == 1.0
    assert natural_ceiling("val/loss") is None and natural_ceiling("val/bleu") is None
