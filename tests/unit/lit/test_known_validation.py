"""`known_validation`: fit's last validation stands in for validating the best checkpoint only when that
checkpoint was written by this process at the step of that validation, on one process."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from attnx.lit.checkpoints import LastValidation, VerifiedCheckpointIO, known_validation

METRICS = {"val/loss": torch.tensor(0.5)}


def trainer(saved_at: dict[str, int], step: int | None, world_size: int = 1) -> SimpleNamespace:
    io = VerifiedCheckpointIO()
    io.saved_at.update(saved_at)
    last = LastValidation()
    last.step, last.metrics = step, METRICS
    return SimpleNamespace(
        strategy=SimpleNamespace(checkpoint_io=io), callbacks=[last], world_size=world_size
    )


def test_the_checkpoint_saved_at_the_last_validation_reuses_its_metrics() -> None:
    assert known_validation(trainer({"best.ckpt": 6}, step=6), "best.ckpt") is METRICS


def test_an_earlier_checkpoint_no_checkpoint_one_from_before_a_resume_or_ddp_validate_again() -> None:
    assert known_validation(trainer({"best.ckpt": 3}, step=6), "best.ckpt") is None  # an earlier epoch's
    assert known_validation(trainer({"best.ckpt": 6}, step=6), None) is None  # the weights in memory
    assert known_validation(trainer({}, step=6), "best.ckpt") is None  # written before a resume
    assert known_validation(trainer({"best.ckpt": 6}, step=None), "best.ckpt") is None  # no validation in fit
    assert known_validation(trainer({"best.ckpt": 6}, step=6, world_size=2), "best.ckpt") is None


def test_a_removed_checkpoint_is_forgotten(tmp_path) -> None:
    io = VerifiedCheckpointIO()
    path = tmp_path / "epoch000.ckpt"
    io.save_checkpoint({"state_dict": {}, "global_step": 4}, path)
    assert io.saved_at == {str(path): 4}
    io.remove_checkpoint(path)
    assert io.saved_at == {} and not path.exists()
