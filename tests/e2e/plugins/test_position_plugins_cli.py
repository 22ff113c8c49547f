"""The relative position scores shipped in attnx.contrib: ALiBi, T5's bias and RoPE. Their defining
properties (slopes, buckets, rotations), relative positions only, their place in multi-head and
single-head attention under a causal mask, a decoder's key cache, and one tiny `attnx train` each."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from helpers.plugins import NAMES
from helpers.tiny import NO_HEATMAPS, ONE_EPOCH, TINY_SELF_ATTN, completed, sizes


@pytest.mark.parametrize("name", NAMES)
def test_attnx_train_with_the_score_at_every_site(tmp_path: Path, name: str) -> None:
    record = completed(
        tmp_path,
        *TINY_SELF_ATTN,
        *ONE_EPOCH,
        *NO_HEATMAPS,
        *sizes(train=64),
        f"encoder/score={name}",
        "encoder.positions=none",
        "decoder=transformer",
        "decoder.d_model=16",
        "decoder.num_layers=1",
        "decoder.ff_dim=16",
        f"decoder/score={name}",
        "decoder.positions=none",
        "attention=multi_head",
        f"score={name}",
    )
    assert record["choices"]["score"] == name
    assert record["config"]["encoder"]["score"]["name"] == name
    assert record["config"]["decoder"]["score"]["name"] == name
    metrics = record["metrics"]
    assert {"test/exact_match", "test/token_acc", "test/loss"} <= set(metrics)
    assert all(math.isfinite(v) for v in metrics.values())
