"""A mechanism with a decoding state as a plugin: retention (Sun et al. 2023, "Retentive Network: A Successor
to Transformer for Large Language Models"), per head h with its own decay γ_h = 1 − 2^(−5−h):

    out_i = Σ_{j ≤ i} γ_h^(i−j) (q_i·k_j / √d) v_j          parallel form: training, a prompt
    S_t = γ_h S_{t−1} + k_t v_tᵀ / √d,   out_t = q_t S_t      recurrent form: decoding

The recurrent form is why it exists: decoding keeps S, d × d numbers per head, however long the sequence
(`state_size`), where softmax attention keeps every key and value. Without a causal mask (an encoder) the
decay is symmetric, γ^|i−j|. q·k may be negative, so its weights are signed. RetNet's xPos rotation and
group norm are left out: this recipe is about the state.

    ATTNX_PLUGIN_PATH=docs/recipes attnx plugins check retention
    ATTNX_PLUGIN_PATH=docs/recipes attnx train task=mqar attention=retention attention.num_heads=2
"""

import math
from typing import Any, NamedTuple

import torch

from attnx import HeadsAttention, Positions, register_attention, visible


class RetentionState(NamedTuple):
    """The recurrent form of the decoding cache: S [B, H, d, d] over the keys so far (batch-first, so beam
    search can reorder it), and how many keys it holds: the last sat at position `keys` − 1."""

    state: torch.Tensor
    keys: int


@register_attention("retention")
class Retention(HeadsAttention):  # W^Q, W^K, W^V into heads, W^O out: `_split`, `_merge`, `key_value_heads`
    default_score = None  # q·k / √d times the decay: it takes no score
    cross_attention = False  # the decay is measured between positions of one sequence
    takes_positions = True
    causal = True
    incremental = True  # `extend` folds each new key into S
    weights_are = "signed"
    gamma: torch.Tensor  # [H] γ_h, a buffer: fixed, but moves with .to() and .double()

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # HeadsAttention's, num_heads among them
        super().__init__(*args, **kwargs)
        heads = torch.arange(self.num_heads, dtype=torch.float32)
        self.register_buffer("gamma", 1 - 2.0 ** (-5 - heads), persistent=False)  # [H]

    def prepare(self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> tuple:
        k, v = self.key_value_heads(keys, values, mask)  # [B, H, Tk, d], 0 at padding
        return k, v, mask[:, None, None, :]

    def extend(
        self, prepared: Any, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
    ) -> RetentionState:
        """S after the new keys: the keys `prepare` kept folded in first, then each new one, in order."""
        if not isinstance(prepared, RetentionState):
            k, v, _ = prepared
            prepared = self.fold(RetentionState(k.new_zeros(*k.shape[:2], k.size(-1), v.size(-1)), 0), k, v)
        k, v, _ = self.prepare(keys, values, mask)
        return self.fold(prepared, k, v)

    def fold(self, cache: RetentionState, k: torch.Tensor, v: torch.Tensor) -> RetentionState:
        """S' = γ^n S + Σ_m γ^(n−1−m) k_m v_mᵀ / √d for n new keys k, v [B, H, n, d]."""
        n = k.size(2)
        gamma = self.gamma.to(k.dtype).view(-1, 1, 1)  # [H, 1, 1]
        decay = gamma ** torch.arange(n - 1, -1, -1, dtype=k.dtype, device=k.device)  # [H, 1, n]
        added = (k * decay.transpose(-1, -2)).transpose(-1, -2) @ v / math.sqrt(self.head_dim)
        return RetentionState(cache.state * gamma**n + added, cache.keys + n)

    def attend(
        self,
        query: torch.Tensor,
        prepared: Any,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if positions is None:
            raise ValueError("retention needs positions: its decay is measured in them")
        q = self._split(self.W_q(query))
        gamma = self.gamma.to(q.dtype).view(-1, 1, 1)
        if isinstance(prepared, RetentionState):  # a decoding step, after every key in S
            after = (positions.query - (prepared.keys - 1)).to(q.dtype)  # [B|1, Tq]: 0 for the next token
            return self._merge(q @ prepared.state * gamma ** after[:, None, :, None]), None
        k, v, mask = prepared
        distance = -positions.relative(4) if positions.causal else positions.relative(4).abs()
        decay = gamma ** distance.clamp(min=0).to(q.dtype)  # later keys are masked below
        weights = (q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) * decay).masked_fill(
            ~visible(mask, positions), 0
        )
        return self._merge(weights @ v), weights if need_weights else None

    def state_size(self, n: int) -> int:
        """The first token's key and value as `prepare` keeps them; from the second on, S: H·d·d."""
        return 2 * self.query_dim if n == 1 else self.num_heads * self.head_dim**2
