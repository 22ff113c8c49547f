"""The Transformer encoder-decoder (Vaswani et al. 2017) end to end: `attnx train encoder=self_attn
decoder=transformer` learns reverse, and `attnx predict` decodes with it greedily and by beam search,
showing its cross-attention and, on request, both self-attentions."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnx.cli import main as cli

from helpers.tiny import completed

pytestmark = pytest.mark.slow

# Default model sizes; data and epochs cut to a test's budget. Without dropout the 315 steps suffice;
# validation only at the end and no heatmaps (drawing them took half the run).
VASWANI = ["task=reverse", "encoder=self_attn", "decoder=transformer", "attention=multi_head"]
BUDGET = ["task.train_size=2000", "task.val_size=200", "task.test_size=200", "task.batch_size=32",
          "trainer.max_epochs=5", "encoder.dropout=0", "decoder.dropout=0",
          "trainer.check_val_every_n_epoch=5", "callbacks.attention_heatmaps=null"]  # fmt: skip


def test_the_transformer_learns_reverse_and_decodes_greedy_and_beam(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    record = completed(tmp_path, *VASWANI, *BUDGET)
    assert record["choices"]["decoder"] == "transformer"
    assert record["metrics"]["test/exact_match"] >= 0.95
    ckpt = tmp_path / "checkpoints" / "last.ckpt"

    outputs = {}
    for beam in (1, 4):
        capsys.readouterr()
        assert cli(["predict", f"ckpt={ckpt}", "input=3 1 4 1 5 9 2", f"decode.beam_size={beam}"]) == 0
        outputs[beam] = capsys.readouterr().out.splitlines()
    assert outputs[1][0] == outputs[4][0] == "2 9 5 1 4 1 3"
    assert (
        outputs[1][1]
        == "multi_head cross-attention, mean of 4 heads: output step (queries) <- source (keys), top 3"
    )
    assert not any("self-attention" in line for line in outputs[1])

    assert cli(["predict", f"ckpt={ckpt}", "input=3 1 4 1 5 9 2", "self_attention=true"]) == 0
    headings = [
        line.split(",")[0] for line in capsys.readouterr().out.splitlines() if "<-" in line and "top" in line
    ]
    assert headings == [
        "multi_head cross-attention",
        "multi_head self-attention layer 1",
        "multi_head self-attention layer 2",
        "multi_head decoder self-attention layer 1",
        "multi_head decoder self-attention layer 2",
    ]
