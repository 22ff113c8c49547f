"""A softmax variant as a plugin: sigmoid attention (Ramapuram et al. 2024, "Theory, Analysis, and Best
Practices for Sigmoid Self-Attention"), each key weighed on its own, with no normalisation over the keys:

    head_h(i) = Σ_j σ(f(q_i W_h^Q, k_j W_h^K) − log n_i) v_j W_h^V

n_i the number of keys query i sees (the real ones, and under a causal mask those at or before it): the
paper's b = −log n, which keeps the output's scale near softmax's at initialisation. Its weights are not a
distribution, and it says so (`weights_are`); everything else is `multi_head`'s: the projections, any score,
the key/value cache.

    ATTNX_PLUGIN_PATH=docs/recipes attnx plugins check sigmoid_attention
"""

import torch

from attnx import MultiHeadAttention, Positions, register_attention, visible


@register_attention("sigmoid_attention")
class SigmoidAttention(MultiHeadAttention):
    weights_are = "nonnegative"  # each in (0, 1), summing to anything: the kit holds them to that

    def attend(
        self,
        query: torch.Tensor,
        prepared: tuple,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        _, keys, values, mask = prepared
        q = self._split(self.W_q(query))
        seen = visible(mask, positions)  # [B, 1, Tq|1, Tk]: the keys each query may see
        n = seen.sum(-1, keepdim=True).to(q.dtype)
        scores = self.score.at(q, keys, positions) - n.log()
        weights = torch.sigmoid(scores.masked_fill(~seen, -torch.inf))  # σ(−∞) = 0: unseen keys weigh nothing
        return self._merge(self.dropout(weights) @ values), weights if need_weights else None
