"""A run whose best checkpoint is fit's last takes that validation's metrics instead of validating the
same weights again (`attnx.train.run._validate`): results.json, metrics.csv and the checkpoint chosen are
what validating again gives, for each model type."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.pytorch import Trainer

import attnx.lit.checkpoints

from helpers.tiny import NO_HEATMAPS, ONE_EPOCH, TINY, TINY_LM, TINY_RNN, sizes, train
from helpers.tiny import completed as run

KINDS = {
    "seq2seq": [*TINY_RNN, *TINY],
    "classifier": ["task=sentiment", *TINY_RNN, *ONE_EPOCH, *sizes(), *NO_HEATMAPS],
    "lm": [*TINY_LM, *ONE_EPOCH, *sizes(), *NO_HEATMAPS],
}


def validations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts `trainer.validate` calls."""
    calls: list[str] = []
    validate = Trainer.validate

    def counted(self: Trainer, *args, **kwargs):
        calls.append(kwargs.get("ckpt_path"))
        return validate(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "validate", counted)
    return calls


@pytest.mark.parametrize("kind", KINDS)
def test_reusing_fit_s_last_validation_changes_no_result(kind: str, tmp_path: Path, monkeypatch) -> None:
    calls = validations(monkeypatch)
    reused = run(tmp_path / "reused", *KINDS[kind])
    assert calls == []  # one epoch: the best checkpoint is the one saved after fit's only validation
    monkeypatch.setattr(attnx.lit.checkpoints, "known_validation", lambda trainer, path: None)
    validated = run(tmp_path / "validated", *KINDS[kind])
    assert len(calls) == 1
    assert list(reused["metrics"].items()) == list(validated["metrics"].items())  # values and their order
    assert reused.get("by_length") == validated.get("by_length")
    assert Path(reused["checkpoint"]).name == Path(validated["checkpoint"]).name
    csv = [(tmp_path / name / "csv" / "metrics.csv").read_text() for name in ("reused", "validated")]
    assert csv[0] == csv[1]


def test_an_earlier_best_checkpoint_is_validated_again(tmp_path: Path, monkeypatch) -> None:
    """Two validations in one epoch, the best by the highest loss: the first, whose weights the second
    validation no longer measured."""
    calls = validations(monkeypatch)
    half = ["trainer.val_check_interval=0.5", "callbacks.model_checkpoint.mode=max"]
    assert train(tmp_path, *TINY_RNN, *TINY, *sizes(train=64), *half) == 0
    assert len(calls) == 1 and "epoch000" in calls[0]
