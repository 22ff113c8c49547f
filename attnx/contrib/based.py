"""Based (Arora et al. 2024, "Simple linear attention language models balance the recall-throughput
tradeoff"): linear attention whose feature map is the second-order Taylor expansion of exp, on queries and
keys projected to a small feature dimension f per head (values keep the head width d = query_dim / H):

    φ(x) = [1, x / f^¼, vec(x xᵀ) / (√2·√f)]          (1 + f + f² features)
    φ(q)·φ(k) = 1 + s + s²/2 ≈ exp(s),   s = q·k / √f
    out_i = φ(q_i)ᵀ S_i / (φ(q_i)ᵀ z_i + ε),   S_i = Σ_{visible j} φ(k_j) v_jᵀ,   z_i = Σ_{visible j} φ(k_j)

1 + s + s²/2 ≥ ½ for every s, so each visible key weighs something, as under softmax. Everything else is
`linear`'s (attnx/contrib/linear.py): the shared state, the chunked causal prefix sum, the explicit matrix
for weights, and decoding from the recurrent state, H·(1 + f + f²)·(d + 1) numbers per sequence: f
trades recall for state (the paper's Figure 2).

Defaults as Zoology's (HazyResearch/zoology): feature_dim 16 and eps 1e-12 are `zoology/mixers/based.py`'s
(`Based`, its TaylorExp map in `zoology/mixers/feature_maps/taylor.py`); num_heads 1 is its MQAR
experiments' (`zoology/experiments/paper_configs/arxiv24_based_figure2/configs.py`), since the class's 12
divides none of the small widths those use. Zoology puts a short convolution before it (`lm.conv`).

    attnx train task=mqar attention=based attention.feature_dim=16
"""

import math

import torch
from torch import nn

from attnx import ScoreFactory, register_attention
from attnx.contrib.linear import LinearAttention


def taylor_feature_map(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = [1, x / f^¼, vec(x xᵀ) / (√2·√f)] over the last dim (f): [..., 1 + f + f²]."""
    f = x.size(-1)
    squares = (x[..., :, None] * x[..., None, :]).flatten(-2)
    return torch.cat([torch.ones_like(x[..., :1]), x / f**0.25, squares / math.sqrt(2 * f)], -1)


@register_attention("based")
class BasedAttention(LinearAttention):
    """`LinearAttention` with the Taylor feature map on W^Q and W^K projecting to `feature_dim` (f ≥ 1) per
    head, and the normaliser φ(q)ᵀz + `eps` (≥ 0), as Zoology's `Based`. Its `reference` is the kernel
    1 + s + s²/2 written directly, so the kit's `reference` check also checks φ."""

    # φ(q)ᵀz + ε: a row of weights sums to Σ/(Σ + ε), 1 only when ε = 0
    weights_are = "nonnegative"

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int,
        score: ScoreFactory | None = None,
        feature_dim: int = 16,
        num_heads: int = 1,
        eps: float = 1e-12,
    ) -> None:
        if feature_dim < 1:
            raise ValueError(f"based needs feature_dim >= 1, got feature_dim={feature_dim}")
        if not eps >= 0:
            raise ValueError(f"based needs eps >= 0, got eps={eps}")
        super().__init__(query_dim, key_dim, value_dim, score, num_heads)
        self.feature_dim, self.eps = feature_dim, eps
        # queries and keys meet in f dimensions per head, not d: the state is (1 + f + f²)·(d + 1)
        self.W_q = nn.Linear(self.query_dim, num_heads * feature_dim, bias=False)
        self.W_k = nn.Linear(self.key_dim, num_heads * feature_dim, bias=False)

    @property
    def features(self) -> int:
        return 1 + self.feature_dim + self.feature_dim**2

    def phi(self, x: torch.Tensor) -> torch.Tensor:
        return taylor_feature_map(x)

    def normalised(self, numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
        return numerator / (denominator + self.eps)

    def kernel(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """1 + s + s²/2 with s = q·k / √f: exp's Taylor polynomial, without φ."""
        s = q @ k.transpose(-1, -2) / math.sqrt(self.feature_dim)
        return 1 + s + s**2 / 2
