"""The blocks' feed-forward sublayers: GELU's FFN and SwiGLU (Shazeer 2020)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnx.nn.transformer import FeedForward, SwiGLU, feed_forward


def test_swiglu_is_w2_of_silu_w1x_times_w3x_without_biases() -> None:
    torch.manual_seed(0)
    layer, x = SwiGLU(6, 10, dropout=0.0), torch.randn(3, 5, 6)
    w1, w2, w3 = layer.w1.weight, layer.w2.weight, layer.w3.weight
    expected = (F.silu(x @ w1.T) * (x @ w3.T)) @ w2.T
    torch.testing.assert_close(layer(x), expected)
    assert sum(p.numel() for p in layer.parameters()) == 3 * 6 * 10  # three matrices, no bias


def test_feed_forward_builds_the_named_mlp_and_none_at_width_0() -> None:
    assert isinstance(feed_forward("gelu", 4, 8, 0.0), FeedForward)
    assert isinstance(feed_forward("swiglu", 4, 8, 0.0), SwiGLU)
    assert feed_forward("swiglu", 4, 0, 0.0) is None


@pytest.mark.parametrize("ff_dim", [8, 0])
def test_an_unknown_mlp_is_refused_naming_the_choices_even_at_width_0(ff_dim: int) -> None:
    with pytest.raises(ValueError, match="ff must be one of gelu, swiglu; got ff='relu'"):
        feed_forward("relu", 4, ff_dim, 0.0)
