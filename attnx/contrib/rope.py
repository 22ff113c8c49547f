"""RoPE: rotary position embedding (Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position
Embedding").

    attnx train encoder=self_attn encoder/score=rope encoder.positions=none \
        decoder=transformer decoder/score=rope decoder.positions=none attention=multi_head score=rope
"""

import math

import torch

from attnx import Positions, Score, register_score


def rotate(x: torch.Tensor, position: torch.Tensor, base: float) -> torch.Tensor:
    """R(p)·x: each pair (x_2i, x_2i+1) of x [..., T, d] turned by the angle p·θ_i, θ_i = base^(−2i/d),
    p the position of its row ([B|1, T], aligned to x's first and second-to-last dims)."""
    d = x.size(-1)
    # float32 angles at least: p·θ_0 = p radians, and half precision has no odd integers above 2048
    dtype = torch.promote_types(x.dtype, torch.float32)
    theta = base ** (-torch.arange(0, d, 2, device=x.device, dtype=dtype) / d)  # [d/2]
    angle = position.to(dtype)[..., None] * theta  # [B|1, T, d/2]
    angle = angle.view(angle.size(0), *[1] * (x.dim() - 3), *angle.shape[1:])
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


@register_score("rope")
class RotaryScore(Score):
    """f(q_i, k_j) = (R(i) q_i)·(R(j) k_j) / √d = q_iᵀ R(j − i) k_j / √d: queries and keys rotated by
    their positions (`rotate`), so the score depends on positions only through j − i. Rotation happens
    in `forward`, with the keys' positions: `prepare` leaves keys as they are, so a decoder's key cache
    holds unrotated keys and stays valid at every step. Needs an even d (coordinates come in pairs) and
    query_dim == key_dim. Nothing is learned.
    """

    uses_positions = True

    def __init__(self, query_dim: int, key_dim: int, base: float = 10000.0) -> None:
        super().__init__(query_dim, key_dim)
        if query_dim != key_dim or query_dim % 2:
            raise ValueError(
                f"rope needs an even d and query_dim == key_dim (it rotates pairs of coordinates of q and "
                f"k), got query_dim={query_dim}, key_dim={key_dim}"
            )
        if base <= 1:
            raise ValueError(f"rope needs base > 1, got base={base}")
        self.base = base

    def forward(self, query: torch.Tensor, keys: torch.Tensor, positions: Positions) -> torch.Tensor:
        q = rotate(query, positions.query, self.base)
        k = rotate(keys, positions.key, self.base)
        return q @ k.transpose(-1, -2) / math.sqrt(self.key_dim)
