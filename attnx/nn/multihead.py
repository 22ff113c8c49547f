"""Multi-head attention (Vaswani et al. 2017): `HeadsAttention`, the projections every multi-head mechanism
shares, and `MultiHeadAttention`, softmax in each head, on PyTorch's fused kernel when it can."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from attnx.nn.attention import Attention, masked_softmax, probe_keys, score_state, visible
from attnx.nn.positions import Positions
from attnx.nn.scores import ScaledDotScore, ScoreFactory
from attnx.registry import register_attention


def lower_triangular(mask: torch.Tensor, positions: Positions | None) -> bool:
    """Whether `visible(mask, positions)` is exactly the index mask j ≤ i of a Tq = Tk square, what a
    fused kernel's `is_causal` builds itself (top-left aligned) without an N×N tensor.

    True iff the positions are causal, every key is real (all of `mask`), the queries sit at the keys'
    positions and those strictly increase: then key_j ≤ query_i = key_i ⟺ j ≤ i. Anything else (a
    decoding step or chunk, Tq < Tk; padding; repeated or unordered positions) is False. The shape tests
    are free; the rest is O(B·N) work reduced to one host sync, against the O(N²) attention it saves.
    """
    if positions is None or not positions.causal:
        return False
    query, key = positions.query, positions.key
    if not query.size(-1) == key.size(-1) == mask.size(-1):
        return False
    exact = mask.all() & (key[..., 1:] > key[..., :-1]).all()
    if query is not key:  # self-attention's positions are one tensor (`Positions.self_attention`)
        exact &= (query == key).all()
    return bool(exact)


class HeadsAttention(Attention):
    """Attention in H heads of d = query_dim / H each: projections W^Q, W^K, W^V into the heads (no biases,
    as Vaswani et al.: a key bias is invisible to softmax anyway, and a zeroed padded key or value then
    projects to exactly 0) and W^O out of their concatenation. What a head computes is the subclass's."""

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int,
        score: ScoreFactory | None = None,
        num_heads: int = 4,
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim, score)
        if num_heads < 1 or query_dim % num_heads:
            raise ValueError(
                f"{type(self).__name__} needs num_heads to divide query_dim, got num_heads={num_heads}, "
                f"query_dim={query_dim}"
            )
        self.num_heads = num_heads
        self.head_dim = query_dim // num_heads
        self.W_q = nn.Linear(query_dim, query_dim, bias=False)
        self.W_k = nn.Linear(key_dim, query_dim, bias=False)
        self.W_v = nn.Linear(value_dim, query_dim, bias=False)
        self.W_o = nn.Linear(query_dim, query_dim)
        self.output_dim = query_dim

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, H·d] -> [B, H, T, d]"""
        return x.view(*x.shape[:-1], self.num_heads, self.head_dim).transpose(1, 2)

    def _merge(self, heads: torch.Tensor) -> torch.Tensor:
        """[B, H, T, d] -> [B, T, H·d] W^O"""
        return self.W_o(heads.transpose(1, 2).flatten(2))

    def key_value_heads(
        self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(K W^K, V W^V), each [B, H, Tk, d], from keys and values whose padding is replaced by 0 first:
        replaced, not multiplied, since padding may hold NaN/inf and 0·NaN is NaN. A padded key then
        projects to exactly 0, as a fused kernel needs: it adds its -inf mask, and NaN + -inf is NaN."""
        pad = ~mask.unsqueeze(-1)
        k, v = (W(x.masked_fill(pad, 0)) for W, x in ((self.W_k, keys), (self.W_v, values)))
        return self._split(k), self._split(v)


@register_attention("multi_head")
class MultiHeadAttention(HeadsAttention):
    """Vaswani et al. 2017: head_h = softmax(f(q W_h^Q, K W_h^K)) V W_h^V over unmasked keys,
    output = [head_1; ...; head_H] W^O, with d = query_dim / H per head and f any score built as
    score(d, d). Weights are [B, H, Tq, Tk]. With `scaled_dot` and no weights requested it runs
    `F.scaled_dot_product_attention` (fused kernels), numerically the explicit path; causal self-attention
    without padding uses the kernel's own causal mask there (`lower_triangular`), in O(N) memory. Incremental:
    a cache keeps the projected K W^K and V W^V, so a decoding step projects only the new keys.
    """

    placement: ClassVar[str] = "after"
    default_score: ClassVar[str | None] = "scaled_dot"
    takes_positions: ClassVar[bool] = True
    causal: ClassVar[bool] = True
    position_free: ClassVar[bool] = True
    incremental: ClassVar[bool] = True

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int,
        score: ScoreFactory | None = None,
        num_heads: int = 4,
        dropout: float = 0.0,
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim, score, num_heads)
        self.score = self.make_score(score, self.head_dim, self.head_dim, num_heads)  # shared over heads
        self.dropout = nn.Dropout(dropout)

    def prepare(
        self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
        """(K W^K [B, H, Tk, d], the score's prepared keys, V W^V [B, H, Tk, d], mask [B, 1, 1, Tk])."""
        k, v = self.key_value_heads(keys, values, mask)
        return k, self.score.prepare(k), v, mask[:, None, None, :]

    def extend(
        self,
        prepared: tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor],
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
        k, _, v, m = prepared
        new_k, _, new_v, new_m = self.prepare(keys, values, mask)
        k = torch.cat([k, new_k], dim=2)
        # the score's key work runs on all keys again: it is free for dot scores, and only a score
        # knows whether its prepare is position-by-position
        return k, self.score.prepare(k), torch.cat([v, new_v], dim=2), torch.cat([m, new_m], dim=-1)

    def state_size(self, n: int) -> int:
        """The K/V cache: K W^K and V W^V, 2·n·query_dim, and what the score's `prepare` keeps beyond the
        projected keys (nothing for scaled_dot)."""
        keys = probe_keys(self, 1, self.num_heads, n, self.head_dim)
        return 2 * n * self.query_dim + score_state(self.score, keys)

    def attend(
        self,
        query: torch.Tensor,
        prepared: Any,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        _, keys, values, mask = prepared
        q = self._split(self.W_q(query))
        if not need_weights and type(self.score) is ScaledDotScore:
            # ScaledDotScore.prepare is the identity, so `keys` are the projected keys. When the visible
            # keys are j ≤ i by index, the kernel's own causal mask replaces the [B, 1, N, N] one (and
            # the int64 j − i behind it): O(N) memory instead of O(N²), and it skips the masked blocks.
            causal = lower_triangular(mask, positions)
            p = self.dropout.p if self.training else 0.0
            heads, weights = (
                F.scaled_dot_product_attention(
                    q,
                    keys,
                    values,
                    attn_mask=None if causal else visible(mask, positions),
                    dropout_p=p,
                    is_causal=causal,
                ),
                None,
            )
        else:
            weights = masked_softmax(self.score.at(q, keys, positions), visible(mask, positions))
            heads = self.dropout(weights) @ values
        return self._merge(heads), weights if need_weights else None
