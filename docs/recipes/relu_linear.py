"""A kernel (linear) mechanism as a plugin: ReLU linear attention (Cai et al. 2023, "EfficientViT:
Lightweight Multi-Scale Attention for High-Resolution Dense Prediction"), softmax's exp(q·k) replaced by
the kernel φ(q)·φ(k) with φ = ReLU, per head:

    out_i = Σ_j φ(q_i)·φ(k_j) v_j / (Σ_j φ(q_i)·φ(k_j) + ε)

Without a causal mask every query shares S = Σ_j φ(k_j) v_jᵀ and z = Σ_j φ(k_j): O(N·d²) instead of
O(N²·d). With one (and whenever weights are asked for) it computes the N×N matrix; `attnx/contrib/linear.py`
shows the causal case in O(N) (chunked prefix sums) and a recurrent decoding state. A query whose features
are all 0 sees nothing (context 0), so the weights are not always a distribution, and it says so.

    ATTNX_PLUGIN_PATH=docs/recipes attnx plugins check relu_linear
"""

import torch
import torch.nn.functional as F

from attnx import HeadsAttention, Positions, register_attention, visible


@register_attention("relu_linear")
class ReLULinearAttention(HeadsAttention):  # W^Q, W^K, W^V into heads, W^O out: `_split`, `_merge`
    default_score = None  # φ is its similarity: it takes no score
    takes_positions = True
    causal = True
    position_free = True
    weights_are = "nonnegative"  # rows sum to 1, or to 0 for a query that sees nothing
    eps = 1e-15

    def prepare(self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> tuple:
        k, v = self.key_value_heads(keys, values, mask)  # padding replaced by 0 before the projections
        return F.relu(k), v, mask[:, None, None, :]  # φ(0) = 0: a padded key adds nothing

    def attend(
        self,
        query: torch.Tensor,
        prepared: tuple,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        phi_k, values, mask = prepared
        phi_q = F.relu(self._split(self.W_q(query)))
        if need_weights or (positions is not None and positions.causal):
            a = (phi_q @ phi_k.transpose(-1, -2)).masked_fill(~visible(mask, positions), 0)
            weights = a / (a.sum(-1, keepdim=True) + self.eps)
            return self._merge(weights @ values), weights if need_weights else None
        state = phi_k.transpose(-1, -2) @ values  # S [B, H, d, d], shared by every query
        normaliser = phi_q @ phi_k.sum(-2, keepdim=True).transpose(-1, -2)  # φ(q)·z [B, H, Tq, 1]
        return self._merge(phi_q @ state / (normaliser + self.eps)), None

    def state_size(self, n: int) -> int:
        """A decoder re-prepares its cached inputs (not `incremental`); `prepare` keeps φ(K W^K), V W^V."""
        return 2 * n * self.query_dim
