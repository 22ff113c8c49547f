"""Sliding-window attention (Beltagy, Peters & Cohan 2020, "Longformer: The Long-Document Transformer"):
multi-head attention in which query i sees only the keys within `window` = w positions of it,

    head_h(i) = Σ_{j ∈ W(i)} softmax_j(f(q_i W_h^Q, k_j W_h^K)) v_j W_h^V,
    W(i) = {j : i − w < j ≤ i}  (causal)   or   {j : |i − j| < w}  (bidirectional),

so self-attention over N positions costs O(N·w) time and memory instead of O(N²), and decoding keeps the
last w keys and values alone: O(w) memory and time per token, however long the sequence. Any score,
position scores (alibi, rope, t5_bias) included; the window is measured in positions, so it needs them.

    attnx train encoder=self_attn encoder/attention=sliding_window encoder.attention.window=8 \
        decoder=transformer decoder/attention=sliding_window
"""

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

from attnx import MultiHeadAttention, Positions, register_attention


def continued(position: torch.Tensor, before: int, after: int) -> torch.Tensor:
    """position [B|1, N] (increasing by one) with `before` positions prepended and `after` appended,
    continuing the count, so that padding never shares a position with a real token."""
    step = torch.arange(1, max(before, after) + 1, device=position.device)
    return torch.cat([position[:, :1] - step[:before].flip(0), position, position[:, -1:] + step[:after]], -1)


class Window(NamedTuple):
    """The decoding cache: the last (at most) w keys' K W^K [B, H, w, d], the score's prepared keys, V W^V,
    their mask [B, 1, 1, w] and their positions [B, w], oldest first."""

    keys: torch.Tensor
    scored: Any
    values: torch.Tensor
    mask: torch.Tensor
    position: torch.Tensor


def last(w: int, dim: int, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """The last w entries along `dim` of `old` followed by `new`, as a tensor of their own: a slice of the
    concatenation would keep the whole of it alive."""
    n_new = min(new.size(dim), w)
    n_old = min(old.size(dim), w - n_new)
    return torch.cat(
        [old.narrow(dim, old.size(dim) - n_old, n_old), new.narrow(dim, new.size(dim) - n_new, n_new)], dim
    )


@register_attention("sliding_window")
class SlidingWindowAttention(MultiHeadAttention):
    """`MultiHeadAttention` restricted to a band of width `window` (≥ 1) around each query; the band is
    causal at causal sites (`positions.causal`).

    Self-attention over aligned positions without weights runs blockwise: blocks of w queries, each
    scored against its own block and the one before (and after, when bidirectional), 2w (3w) keys, with
    `Positions` for the block, so O(N·w). Other shapes (a decoding step) and `need_weights=True` mask the
    full Tq×Tk scores with the band. Cross-attention is not offered: a window over another sequence's
    positions is Luong's local attention (`local_window`).

    Incremental: `extend` turns `prepare`'s keys into a `Window` of the last w, with their positions, and
    slides it by the new keys; a step attends over the window at its own positions (a query after its
    keys: the decoder's next token), O(w). Once the window is full it no longer holds a whole row of keys,
    and a step asked for weights returns None.
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

    def state_size(self, n: int) -> int:
        """`MultiHeadAttention`'s K/V cache of the last min(n, w) keys: 2·min(n, w)·D (with scaled_dot)."""
        return super().state_size(min(n, self.window))

    def extend(  # type: ignore[override]  # a Window, where multi_head's cache is its 4-tuple
        self,
        prepared: tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor] | Window,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
    ) -> Window:
        k, _, v, m = self.prepare(keys, values, mask)
        if isinstance(prepared, Window):
            old_k, _, old_v, old_m, position = prepared
        else:  # prepare's keys, at positions 0..Tk-1
            old_k, _, old_v, old_m = prepared
            position = torch.arange(old_m.size(-1), device=k.device).expand(k.size(0), -1)
        after = position[:, -1:] + 1 + torch.arange(keys.size(1), device=k.device)
        position = last(self.window, 1, position, after)
        k = last(self.window, 2, old_k, k)
        # the score's key work runs on the window again: only a score knows whether it is per key
        return Window(
            k, self.score.prepare(k), last(self.window, 2, old_v, v), last(self.window, 3, old_m, m), position
        )

    def band(self, mask: torch.Tensor, positions: Positions) -> torch.Tensor:
        """The keys each query may see before causality: real keys within the window, and its own key.
        A padded query would otherwise see no key at all in its window; softmax over nothing is NaN, and
        its gradient would reach every weight."""
        relative = positions.relative(4)
        return (mask | (relative == 0)) & (relative.abs() < self.window)

    def attend(
        self,
        query: torch.Tensor,
        prepared: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | Window,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if positions is None:
            raise ValueError("sliding_window needs positions: its window is measured in them")
        if isinstance(prepared, Window):
            at = Positions(positions.query, prepared.position, positions.causal)
            full = prepared.position.size(-1) == self.window  # then keys before the window are not in it
            band = self.band(prepared.mask, at)
            return super().attend(query, (*prepared[:3], band), need_weights and not full, at)
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
        i − w < j ≤ i (causal) or |i − j| < w, in positions; output [head_1; ...; head_H] W^O, weights the
        softmax. The full Tq×Tk scores masked to the window, from the equation alone: it shares no helper
        with the fast paths (projections, heads, band, blocks), only the score f, which it is given."""
        if positions is None:
            raise ValueError("sliding_window needs positions: its window is measured in them")
        real = mask[..., None]

        def heads(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            """x Wᵀ split into the heads, [B, H, T, d]."""
            return (x @ w.T).reshape(x.size(0), x.size(1), self.num_heads, -1).transpose(1, 2)

        q = heads(query, self.W_q.weight)
        k = heads(torch.where(real, keys, 0), self.W_k.weight)
        v = heads(torch.where(real, values, 0), self.W_v.weight)
        i, j = positions.query[:, None, :, None], positions.key[:, None, None, :]  # [B|1, 1, Tq|Tk, ·]
        window = (j - i).abs() < self.window
        if positions.causal:
            window = window & (j <= i)
        # a padded query more than w past the last real key has none in its window, and softmax over
        # nothing is NaN: it sees its own (zeroed) key, as the module lets it. A real query of
        # self-attention sees its own real key anyway, so its row is the equation's.
        seen = window & (mask[:, None, None, :] | (j == i))
        scores = self.score.at(q, self.score.prepare(k), positions).masked_fill(~seen, -math.inf)
        weights = torch.softmax(scores, -1)
        out = (weights @ v).transpose(1, 2).reshape(query.size(0), query.size(1), -1)
        return out @ self.W_o.weight.T + self.W_o.bias, weights if need_weights else None
