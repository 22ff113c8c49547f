"""Example plugin: local attention (Luong et al. 2015, §3.2). Copy this file to start your own
mechanism (and give it a name of its own: two plugins may not register the same name).

    attnx train attention=local_window attention.window=3 score=general
"""

import torch
from torch import nn

from attnx import Positions, ScoredAttention, ScoreFactory, masked_softmax, register_attention


@register_attention("local_window")
class LocalAttention(ScoredAttention):
    """Attend only to the 2D+1 keys around a centre p_i (D = `window`), favouring those near it:

        a_ij = softmax_j( f(q_i, k_j) − (j − p_i)² / (2σ²) )  over valid j with |j − round(p_i)| ≤ D,

    σ = D/2 (the Gaussian of Luong's local-p, renormalised so weights sum to 1). Positions count
    valid keys only, L of them. The centre is
      predicted (local-p):  p_i = (L − 1) · sigmoid(v_pᵀ tanh(W_p q_i)) — works one decoder step at a time;
      fixed (local-m):      p_i = (i + ½) · L / Tq − ½, query i's position scaled to the key length
                            (p_i = i in self-attention; the middle for a single query).
    round(p_i) is always a valid key, so no row is left empty. Longformer's banded self-attention, in
    O(N·w) rather than this O(Tq·Tk), is `sliding_window`.
    """

    default_score = "dot"
    centre: nn.Module | None  # predicts p_i (local-p); None for the fixed centre (local-m)

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int,
        score: ScoreFactory | None = None,
        window: int = 2,
        predict_centre: bool = True,
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim, score)
        if window < 1:
            raise ValueError(f"local_window needs window >= 1, got {window}")
        self.window = window
        if predict_centre:
            self.centre = nn.Sequential(
                nn.Linear(query_dim, query_dim, bias=False), nn.Tanh(), nn.Linear(query_dim, 1, bias=False)
            )
        else:
            self.centre = None

    def attend(
        self,
        query: torch.Tensor,
        prepared: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        need_weights: bool = True,
        positions: Positions | None = None,  # unused: the window counts valid keys, not positions
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        keys, values, mask = prepared
        # positions in float32 at least: bfloat16 has no odd integers above 256, and a centre that rounds
        # one way or the other moves the whole window
        dtype = torch.promote_types(query.dtype, torch.float32)
        position = mask.cumsum(-1).sub(1).unsqueeze(1).to(dtype)  # [B, 1, Tk], rank among valid keys
        length = mask.sum(-1, keepdim=True).unsqueeze(1).to(dtype)  # [B, 1, 1]
        if self.centre is not None:
            with torch.autocast(query.device.type, enabled=False):  # the centre's own dtype, not autocast's
                p = (length - 1) * torch.sigmoid(self.centre(query).to(dtype))  # [B, Tq, 1]
        else:
            i = torch.arange(query.size(1), dtype=dtype, device=query.device)[:, None]
            p = (i + 0.5) * length / query.size(1) - 0.5
        near = (position - p.round()).abs() <= self.window
        sigma = self.window / 2
        scores = self.score(query, keys) - (position - p).pow(2) / (2 * sigma**2)
        weights = masked_softmax(scores, mask.unsqueeze(1) & near)
        return weights @ values, weights if need_weights else None
