"""Sliding-window attention (Beltagy, Peters & Cohan 2020, "Longformer: The Long-Document Transformer"):
multi-head attention in which query i sees only the keys within `window` = w positions of it,

    head_h(i) = Σ_{j ∈ W(i)} softmax_j(f(q_i W_h^Q, k_j W_h^K)) v_j W_h^V,
    W(i) = {j : i − w < j ≤ i}  (causal)   or   {j : |i − j| < w}  (bidirectional),

so self-attention over N positions costs O(N·w) time and memory instead of O(N²). Any score, position
scores (alibi, rope, t5_bias) included; the window is measured in positions, so it needs them.

    attnx train encoder=self_attn encoder/attention=sliding_window encoder.attention.window=8 \
        decoder=transformer decoder/attention=sliding_window
"""

import math
from typing import Any

import torch
import torch.nn.functional as F

from attnx import MultiHeadAttention, Positions, register_attention


def continued(position: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """position [B|1, N] (increasing by one) with `before` positions prepended and `after` appended,
    continuing the count, so that padding never shares a position with a real token."""
    step = torch.arange(1, max(before, after) + 1, device=position.device)
    return torch.cat([position[:, :1] - step[:before].flip(0), position, position[:, -1:] + step[:after]], -1)


@register_attention("sliding_window")
class SlidingWindowAttention(MultiHeadAttention):
    """`MultiHeadAttention` restricted to a band of width `window` (≥ 1) around each query; the band is
    causal at causal sites (`positions.causal`).

    Self-attention over aligned positions without weights runs blockwise: blocks of w queries, each
    scored against its own block and the one before (and after, when bidirectional), 2w (3w) keys, with
    `Positions` for the block, so O(N·w). Other shapes (a decoding step) and `need_weights=True` mask the
    full Tq×Tk scores with the band. Cross-attention is not offered: a window over another sequence's
    positions is Luong's local attention (`local_window`).
    """

    cross_attention = False
    position_free = False
    memory_growth = 1

    def __init__(self, *args: Any, window: int = 16, **kwargs: Any) -> None:
        """`window` and `MultiHeadAttention`'s arguments, which its config lists too (num_heads, dropout)."""
        super().__init__(*args, **kwargs)
        if window < 1:
            raise ValueError(f"sliding_window needs window >= 1, got {window}")
        self.window = window

    def band(self, mask: torch.Tensor, positions: Positions) -> torch.Tensor:
        """The keys each query may see before causality: real keys within the window, and its own key.
        A padded query would otherwise see no key at all in its window; softmax over nothing is NaN, and
        its gradient would reach every weight."""
        relative = positions.relative(4)
        return (mask | (relative == 0)) & (relative.abs() < self.window)

    def attend(
        self,
        query: torch.Tensor,
        prepared: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if positions is None:
            raise ValueError("sliding_window needs positions: its window is measured in them")
        k, keys, values, mask = prepared
        if need_weights or not positions.aligned():
            return super().attend(
                query, (k, keys, values, self.band(mask, positions)), need_weights, positions
            )
        return self.banded(query, prepared, positions), None

    def banded(
        self,
        query: torch.Tensor,
        prepared: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
        positions: Positions,
    ) -> torch.Tensor:
        """Self-attention context [B, N, D], block by block: never an N×N tensor."""
        k, _, values, mask = prepared
        batch, n, w = query.size(0), query.size(1), self.window
        blocks = -(-n // w)
        tail = blocks * w - n  # pads N to whole blocks
        # a block's keys start one block before it, and end one block after it when bidirectional
        after = tail + (0 if positions.causal else w)
        span = (2 if positions.causal else 3) * w

        def windows(x: torch.Tensor) -> torch.Tensor:
            """[B, ·, N, d] -> [B·blocks, ·, span, d]: the keys of each block (zeros beyond the sequence)."""
            x = F.pad(x, (0, 0, w, after)).unfold(2, span, w)  # [B, ·, blocks, d, span]
            return x.transpose(-1, -2).transpose(1, 2).flatten(0, 1)

        # the score's key work runs again on each block's keys: it is per key for every score
        k = windows(k)
        mask = F.pad(mask, (w, after), value=False).unfold(-1, span, w).movedim(-2, 1).flatten(0, 1)
        key_position = continued(positions.key, w, after).unfold(-1, span, w)  # [B|1, blocks, span]
        query_position = continued(positions.query, 0, tail).unflatten(-1, (blocks, w))
        at = Positions(
            query_position.expand(batch, -1, -1).flatten(0, 1),
            key_position.expand(batch, -1, -1).flatten(0, 1),
            positions.causal,
        )
        queries = F.pad(query, (0, 0, 0, tail)).unflatten(1, (blocks, w)).flatten(0, 1)
        prepared = k, self.score.prepare(k), windows(values), self.band(mask, at)
        context, _ = super().attend(queries, prepared, False, at)
        return context.unflatten(0, (batch, blocks)).flatten(1, 2)[:, :n]

    def reference(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """head_h(i) = Σ_{j ∈ W(i)} softmax_j(f(q_i W_h^Q, k_j W_h^K)) v_j W_h^V over the real keys j with
        i − w < j ≤ i (causal) or |i − j| < w, in positions; output [head_1; ...; head_H] W^O, weights
        the softmax. The full Tq×Tk scores masked to the window, independent of `banded` and `band`."""
        if positions is None:
            raise ValueError("sliding_window needs positions: its window is measured in them")
        q = self._split(self.W_q(query))
        k, v = self.key_value_heads(keys, values, mask)
        offset = positions.relative(4)  # j − i
        window = offset.abs() < self.window
        if positions.causal:
            window = window & (offset <= 0)
        # a padded query more than w past the last real key has none in its window, and softmax over
        # nothing is NaN: it sees its own (zeroed) key, as the module lets it. A real query of
        # self-attention sees its own real key anyway, so its row is the equation's.
        seen = window & (mask[:, None, None, :] | (offset == 0))
        scores = self.score.at(q, self.score.prepare(k), positions).masked_fill(~seen, -math.inf)
        weights = torch.softmax(scores, -1)
        return self._merge(self.dropout(weights) @ v), weights if need_weights else None
