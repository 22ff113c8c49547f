"""Learning, not just running: short CPU runs that reproduce the basic findings in miniature."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.tiny import NO_HEATMAPS, results, train

pytestmark = pytest.mark.slow

# no heatmaps: drawing them at test end took a third of the longer run
SMALL = ["encoder.embed_dim=32", "encoder.hidden_dim=64", "decoder.embed_dim=32", "decoder.hidden_dim=64",
         "task.val_size=100", "task.test_size=100", *NO_HEATMAPS]  # fmt: skip


def metrics(root: Path) -> dict[str, dict[str, float]]:
    return {r["choices"]["attention"]: r["metrics"] for r in results(root)}


def test_additive_attention_learns_to_reverse_short_sequences(tmp_path: Path) -> None:
    train(tmp_path, "task=reverse", "attention=additive", "task.train_size=3000", "trainer.max_epochs=4",
          *SMALL)  # fmt: skip
    assert metrics(tmp_path)["additive"]["test/exact_match"] >= 0.9


def test_fixed_context_falls_far_behind_attention_on_long_sequences(tmp_path: Path) -> None:
    """Bahdanau et al. (2015): one fixed vector C cannot carry a 30-40 token sequence; attention can."""
    train(tmp_path, "task=reverse", "attention=additive,fixed_c", "task.min_len=30", "task.max_len=40",
          "task.train_size=4000", "task.batch_size=32", "trainer.max_epochs=2", "optim.lr=0.01", *SMALL,
          sweep=True)  # fmt: skip
    result = metrics(tmp_path)
    assert result["fixed_c"]["test/exact_match"] < 0.05
    assert result["additive"]["test/token_acc"] > result["fixed_c"]["test/token_acc"] + 0.4
