"""Fast paths give the explicit path's results: the fused self-attention encoder with gradients, the
training steps' use of the fused kernel, training-loss logging only on logger steps,
and the data loader's settings.

(SDPA inside MultiHeadAttention is tested in test_attention.py, the decoder's hoisted key work in
test_decoders.py.)
"""

from __future__ import annotations

import csv
from pathlib import Path

import lightning.pytorch as pl
import pytest

from helpers.tiny import FUSED, ONE_EPOCH, train


def test_training_loss_is_logged_only_on_logger_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning writes step values every log_every_n_steps; the other steps' self.log calls are skipped."""
    calls: list[str] = []
    log = pl.LightningModule.log
    monkeypatch.setattr(
        pl.LightningModule,
        "log",
        lambda self, name, *a, **kw: calls.append(name) or log(self, name, *a, **kw),
    )
    overrides = ["task=sentiment", *FUSED, *ONE_EPOCH, "trainer.log_every_n_steps=2", "test=false"]
    assert train(tmp_path, *overrides) == 0
    rows = list(csv.DictReader((tmp_path / "csv" / "metrics.csv").open()))
    logged = [int(row["step"]) for row in rows if row.get("train/loss")]
    assert logged == [1, 3] and calls.count("train/loss") == 2  # 32 examples in batches of 8: 4 steps
