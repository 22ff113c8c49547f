"""ALiBi: attention with linear biases (Press, Smith & Lewis 2022, "Train Short, Test Long").

    attnx train encoder=self_attn encoder/score=alibi encoder.positions=none \
        decoder=transformer decoder/score=alibi decoder.positions=none attention=multi_head score=alibi
"""

import math

import torch

from attnx import Positions, Score, register_score, require_equal_dims


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """m_h = 2^(−8h/H), h = 1..H, for H a power of two. For other H the paper's rule: the slopes of the
    closest power of two P below H, then every other slope of 2P until there are H."""

    def geometric(n: int) -> list[float]:
        return [2 ** (-8 * h / n) for h in range(1, n + 1)]

    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = geometric(closest) + geometric(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes)


@register_score("alibi")
class ALiBiScore(Score):
    """f(q_i, k_j) = q_i·k_j / √d − m_h·|i − j|, a fixed penalty linear in the distance with a slope m_h
    per head (`alibi_slopes`), in place of position embeddings; nothing is learned. Under a causal mask
    only j ≤ i is visible and |i − j| = i − j, the paper's (decoder-only) form; bidirectional
    self-attention and cross-attention use the symmetric |i − j|. The penalty depends only on the
    distance, which is why the paper's models extrapolate to sequences longer than in training.
    """

    uses_positions = True
    slopes: torch.Tensor  # [H] m_h, a buffer

    def __init__(self, query_dim: int, key_dim: int, num_heads: int = 1) -> None:
        super().__init__(query_dim, key_dim)
        require_equal_dims(self)
        self.num_heads = num_heads
        # a buffer, not a parameter: fixed, but moves with .to() and .double()
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, positions: Positions) -> torch.Tensor:
        if self.num_heads > 1 and (query.dim() < 4 or query.size(-3) != self.num_heads):
            raise ValueError(f"alibi has {self.num_heads} heads; queries must be [B, H, Tq, d]")
        distance = positions.relative(query.dim()).abs().to(query.dtype)  # [B|1, (1,) Tq, Tk]
        # one slope per head on dim -3; a single head broadcasts over whatever leads
        slopes = self.slopes.to(query.dtype).view(-1, 1, 1)
        return query @ keys.transpose(-1, -2) / math.sqrt(self.key_dim) - slopes * distance
