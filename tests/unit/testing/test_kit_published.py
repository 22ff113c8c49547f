"""Correct published mechanisms written as plugins pass the whole kit, however unusual: a score with an MLP
over distances whose ReLU units need not all fire at the kit's positions (FIRE), weights that are not a
distribution (softmax with an implicit null key), a temperature from each query's own count of keys
(log-n scaling). Sigmoid attention and KERPLE are recipes (tests/plugins/test_recipes.py)."""

import math

import torch
from test_kit_properties import LogLengthSeen
from torch import nn

from attnx.contrib.sliding_window import SlidingWindowAttention
from attnx.nn.attention import visible
from attnx.nn.multihead import MultiHeadAttention
from attnx.nn.positions import Positions
from attnx.nn.scores import DotScore
from attnx.testing import CHECKS, check_attention, check_score

NO_REFERENCE = [c for c in CHECKS if c != "reference"]
POSITION_SCORE = [c for c in CHECKS if c not in ("permutation", "reference", "compiled")]


class FIREScore(DotScore):
    """FIRE (Li et al. 2024, "Functional Interpolation for Relative Positions Improves Long Context
    Transformers"): q·k/√d plus a bias per head from an MLP of the normalised distance,

        b_h(i, j) = f_θ(ψ(|i − j|) / ψ(max(L, i)))_h,   ψ(x) = log(c·x + 1),

    f_θ: 1 → 32 (ReLU) → H, with c > 0 and the threshold L learned (initialised at 1 and 512, as the
    paper's). Many of f_θ's ReLU units never fire at the distances a short sequence has, and its output
    bias is the same for every key: under softmax it changes nothing."""

    uses_positions = True

    def __init__(self, query_dim: int, key_dim: int, num_heads: int = 1, width: int = 32) -> None:
        super().__init__(query_dim, key_dim)
        self.num_heads = num_heads
        self.mlp = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, num_heads))
        self.log_c = nn.Parameter(torch.zeros(()))
        self.threshold = nn.Parameter(torch.tensor(512.0))

    def forward(self, query: torch.Tensor, keys: torch.Tensor, positions: Positions) -> torch.Tensor:
        def psi(x: torch.Tensor) -> torch.Tensor:
            return torch.log1p(self.log_c.exp() * x)

        distance = positions.relative().abs().to(query.dtype)  # [B|1, Tq, Tk]
        at = positions.query.to(query.dtype)[..., None]  # i, [B|1, Tq, 1]
        bias = self.mlp((psi(distance) / psi(torch.maximum(self.threshold.abs(), at)))[..., None])
        bias = bias.movedim(-1, -3)  # [B|1, H, Tq, Tk]
        bias = (
            bias.squeeze(-3)
            if query.dim() == 3
            else bias.view(bias.size(0), *[1] * (query.dim() - 4), *bias.shape[1:])
        )
        return super().forward(query, keys) / math.sqrt(self.key_dim) + bias


class SoftmaxOne(MultiHeadAttention):
    """softmax₁ (Miller 2023, "Attention Is Off By One"): exp(s_j) / (1 + Σ_k exp(s_k)), as if a null key
    of score 0 were always there, so that a head can attend to nothing. Its weights sum to less than 1,
    and it declares them non-negative."""

    weights_are = "nonnegative"

    def attend(self, query, prepared, need_weights=True, positions=None):
        _, keys, values, mask = prepared
        scores = self.score.at(self._split(self.W_q(query)), keys, positions)
        scores = scores.masked_fill(~visible(mask, positions), -math.inf)
        top = scores.amax(-1, keepdim=True).clamp(min=0)  # the null key's 0 counts among the scores
        e = (scores - top).exp()
        weights = e / ((-top).exp() + e.sum(-1, keepdim=True))
        return self._merge(self.dropout(weights) @ values), weights if need_weights else None


def test_fire_passes_alone_in_multi_head_and_in_sliding_window_attention() -> None:
    assert check_score(FIREScore) == POSITION_SCORE
    assert check_attention(MultiHeadAttention, FIREScore) == POSITION_SCORE
    ran = check_attention(SlidingWindowAttention, FIREScore, window=4)
    assert "gradients" in ran and "parameters" in ran and "state" in ran


def test_fire_has_units_and_a_bias_that_no_call_of_the_kit_moves() -> None:
    """What the kit's parameters check must let pass: elements with a zero gradient that is the
    derivative, not a flaw."""
    score = FIREScore(4, 4, num_heads=2).double()
    q, k = torch.randn(1, 2, 5, 4, dtype=torch.float64), torch.randn(1, 2, 5, 4, dtype=torch.float64)
    logits = score(q, k, Positions.self_attention(5, False))
    (torch.softmax(logits, -1) * torch.randn(logits.shape, dtype=torch.float64)).sum().backward()
    assert (score.mlp[0].weight.grad == 0).any() and (score.mlp[0].weight.grad != 0).any()
    assert torch.allclose(score.mlp[2].bias.grad, torch.zeros(2, dtype=torch.float64), atol=1e-12)


def test_softmax_one_passes_with_weights_that_sum_to_less_than_one() -> None:
    assert check_attention(SoftmaxOne) == NO_REFERENCE
    x = torch.randn(1, 4, 8)
    _, weights = SoftmaxOne(8, 8, 8)(x, x, x, torch.ones(1, 4, dtype=torch.bool))
    assert (weights.sum(-1) < 1).all()


def test_log_n_scaling_by_the_keys_each_query_sees_passes() -> None:
    assert check_attention(LogLengthSeen) == NO_REFERENCE
