"""A score as a plugin: KERPLE's logarithmic kernel (Chi et al. 2022, "KERPLE: Kernelized Relative
Positional Embedding for Length Extrapolation"), a relative-position bias with two learned parameters per
head, r₁ and r₂ of shape [H]:

    f(q_i, k_j) = q_i·k_j / √d − r₁ log(1 + r₂ |i − j|),   r₁, r₂ > 0

    ATTNX_PLUGIN_PATH=docs/recipes attnx plugins check kerple
    ATTNX_PLUGIN_PATH=docs/recipes attnx train task=mqar attention=multi_head score=kerple lm.positions=none
"""

import math

import torch
from torch import nn

from attnx import Positions, Score, register_score, require_equal_dims


@register_score("kerple")
class KerpleLogScore(Score):
    uses_positions = True  # forward takes the query and key positions third

    def __init__(self, query_dim: int, key_dim: int, num_heads: int = 1) -> None:
        """`num_heads`: the heads the score is shared over (given by a multi-head mechanism, 1 elsewhere),
        one r₁ and one r₂ each."""
        super().__init__(query_dim, key_dim)
        require_equal_dims(self)
        self.num_heads = num_heads
        # learned as logarithms, so that any update keeps them positive
        self.log_r1 = nn.Parameter(torch.zeros(num_heads))
        self.log_r2 = nn.Parameter(torch.zeros(num_heads))

    def forward(self, query: torch.Tensor, keys: torch.Tensor, positions: Positions) -> torch.Tensor:
        distance = positions.relative(query.dim()).abs().to(query.dtype)  # |i − j|, [B|1, (1,) Tq, Tk]
        # one value per head on the heads' dim, [B, H, Tq, Tk]; a single head broadcasts over what leads
        r1, r2 = (p.exp().to(query.dtype).view(-1, 1, 1) for p in (self.log_r1, self.log_r2))
        return query @ keys.transpose(-1, -2) / math.sqrt(self.key_dim) - r1 * torch.log1p(r2 * distance)
