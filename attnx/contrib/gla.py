"""Gated linear attention (Yang et al. 2023, "Gated Linear Attention Transformers with Hardware-Efficient
Training"): retention (contrib/retnet.py) whose decay is a gate computed from each token, one rate per key
feature,

    S_t = diag(α_t) S_{t−1} + k_tᵀ v_t,   o_t = q_t S_t,   α_t = σ(x_t W_α)^(1/τ),   W_α = W_α¹ W_α² + b

with W_α of low rank r (D → r → H·d_k), and τ = 16 keeping α near 1 so that the state forgets slowly at
initialisation. A_ij = Σ_f q_if k_jf Π_{j<l≤i} α_lf, signed and not normalised, is what `need_weights`
returns; the heads' outputs are normalised and gated, (swish(x W^G) ⊙ RMSNorm(o)) W^O, as the paper's layer.
Everything else is retention's: the chunked causal form, decoding from S (H·d_k·d_v numbers), the
reference recurrence. Only the decay differs, hence two plugins rather than one with a switch: each one's
hyperparameters then all do something (`retnet` has no gate to size).

Defaults as flash-linear-attention's `GatedLinearAttention` (fla/layers/gla.py): num_heads 4,
gate_low_rank_dim 16, gate_logit_normalizer 16 (τ); its keys are half the width (expand_k 0.5), here they
keep the head width d = D / H, as `retnet`'s and `linear`'s do.

    attnx train task=mqar attention=gla attention.num_heads=2
"""

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from attnx import register_attention
from attnx.contrib.retnet import DecayedLinearAttention


@register_attention("gla")
class GatedLinearAttention(DecayedLinearAttention):
    """`DecayedLinearAttention` with GLA's data-dependent gate: log α_t = logsigmoid(x_t W_α) / τ, per key
    feature and head, from the key token x_t."""

    def __init__(
        self, *args: Any, gate_low_rank_dim: int = 16, gate_logit_normalizer: float = 16.0, **kwargs: Any
    ) -> None:
        """`gate_low_rank_dim` r ≥ 1, `gate_logit_normalizer` τ > 0, and `DecayedLinearAttention`'s
        arguments (num_heads), which its config lists too."""
        if gate_low_rank_dim < 1:
            raise ValueError(f"gla needs gate_low_rank_dim >= 1, got gate_low_rank_dim={gate_low_rank_dim}")
        if not gate_logit_normalizer > 0:
            raise ValueError(
                f"gla needs gate_logit_normalizer > 0, got gate_logit_normalizer={gate_logit_normalizer}"
            )
        super().__init__(*args, **kwargs)
        self.gate_logit_normalizer = gate_logit_normalizer
        self.W_alpha = nn.Sequential(
            nn.Linear(self.key_dim, gate_low_rank_dim, bias=False),
            nn.Linear(gate_low_rank_dim, self.query_dim),
        )

    @property
    def gate_width(self) -> int:
        return self.head_dim

    def log_decay(self, keys: torch.Tensor) -> torch.Tensor:
        return self._split(F.logsigmoid(self.W_alpha(keys)) / self.gate_logit_normalizer)
