"""Every run's record has its validation curve and the convergence verdict (attnx.track.convergence);
the curve survives a resume, and `convergence.stop=true` ends a run once its curve has converged."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.tiny import TINY, TINY_RNN, completed, sizes

# 48 examples in batches of 16: an epoch is 3 steps, validated after each of them
EVERY_STEP = [*TINY_RNN, *TINY, "trainer.val_check_interval=1"]
FIELDS = {"metric", "tolerance", "ceiling", "validations", "improvement", "margin", "converged", "reason"}
FIELDS |= {"noise", "noise_source", "examples"}  # what the margin is made of (attnx.track.convergence)


def test_a_record_has_a_point_per_validation_and_a_verdict_and_a_resume_extends_them(tmp_path: Path) -> None:
    first = completed(tmp_path, *EVERY_STEP, "trainer.max_epochs=2")
    curve, verdict = first["curve"], first["convergence"]
    assert {"val/loss", "val/exact_match", "val/token_acc"} <= set(curve)
    assert [step for step, _ in curve["val/loss"]] == [1, 2, 3, 4, 5, 6]
    assert all(isinstance(value, float) for _, value in curve["val/exact_match"])
    assert set(verdict) == FIELDS and verdict["metric"] == "val/exact_match" and verdict["validations"] == 6
    assert verdict["ceiling"] == 1.0 and verdict["tolerance"] == 0.005 and verdict["converged"] is not None
    assert verdict["examples"] == 16  # exact match is a share of the 16 validation examples: binomial noise
    resumed = completed(tmp_path, *EVERY_STEP, "trainer.max_epochs=3", "resume=auto")
    assert resumed["resumed_from"].endswith("last.ckpt")
    assert resumed["curve"]["val/loss"][:6] == curve["val/loss"]  # the checkpoint carried the curve
    assert [step for step, _ in resumed["curve"]["val/loss"]] == list(range(1, 10))
    assert resumed["convergence"]["validations"] == 9


def test_the_curve_is_fit_s_whole_even_when_the_best_checkpoint_is_an_early_one(tmp_path: Path) -> None:
    """Testing the best checkpoint restores the callbacks' states as they were when it was saved: the
    record keeps the curve of the whole fit, not the best checkpoint's (a quick-suite run once lost its
    last validations, and its verdict followed the truncated curve)."""
    worst_first = ["callbacks.model_checkpoint.mode=max"]  # the highest val/loss: an early validation
    record = completed(tmp_path, *EVERY_STEP, "trainer.max_epochs=3", *worst_first)
    assert not record["checkpoint"].endswith("epoch002.ckpt")
    assert [step for step, _ in record["curve"]["val/loss"]] == list(range(1, 10))
    assert record["convergence"]["validations"] == 9


def test_stop_ends_a_run_once_its_curve_has_converged(tmp_path: Path) -> None:
    """A tiny model's exact match stays flat from the start: the run stops at its 4th validation."""
    record = completed(tmp_path, *EVERY_STEP, "trainer.max_epochs=4", "convergence.stop=true")
    assert record["steps"] == 4 < 12
    assert record["convergence"]["converged"] is True and record["convergence"]["validations"] == 4
    assert record["convergence"]["reason"] == "plateaued"


def test_a_loss_curve_is_judged_lower_is_better_without_a_ceiling(tmp_path: Path) -> None:
    record = completed(tmp_path, *EVERY_STEP, "trainer.max_epochs=2", "convergence.metric=val/loss")
    verdict = record["convergence"]
    assert verdict["metric"] == "val/loss" and verdict["ceiling"] is None
    assert verdict["examples"] is None and verdict["noise_source"] == "curve"  # a loss is no proportion
    losses = [value for _, value in record["curve"]["val/loss"]]
    # 6 validations, windows of one: the last loss's fall below the one before it counts as improvement
    assert verdict["improvement"] == pytest.approx(losses[-2] - losses[-1])


def test_stop_in_a_run_shorter_than_its_first_validation_changes_nothing(tmp_path: Path) -> None:
    """No validation: no curve, no verdict, and the run completes (issue 29's regression, with the stop)."""
    record = completed(tmp_path, *TINY_RNN, *TINY, *sizes(), "trainer.max_steps=2", "convergence.stop=true")
    assert record["steps"] == 2 and record["curve"] == {}
    assert record["convergence"]["converged"] is None and record["convergence"]["validations"] == 0
