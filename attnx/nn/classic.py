"""The single-head mechanisms of 2014–2015: no attention (Sutskever), one fixed context (Cho), and
softmax over scored keys (`ScoredAttention`), placed before the RNN step (Bahdanau) or after it (Luong)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from attnx.nn.attention import Attention, masked_softmax, probe_keys, score_state, visible
from attnx.nn.positions import Positions
from attnx.nn.scores import ScoreFactory
from attnx.registry import register_attention


@register_attention("none")
class NoAttention(Attention):
    """No attention (Sutskever et al. 2014): the context is the mean of the unmasked values,
    c = Σ_j m_j v_j / Σ_j m_j, the same for every query. A classifier pools with it; a
    seq2seq decoder never calls it (it starts from the encoder summary and sees nothing else).
    """

    placement: ClassVar[str] = "none"
    default_score: ClassVar[str | None] = None
    self_attention: ClassVar[bool] = False  # every position would get the same mean: not a layer
    position_free: ClassVar[bool] = True
    memory_growth: ClassVar[int] = 1

    def prepare(self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1)
        # where, not multiply: padding may hold inf/NaN and 0·NaN is NaN
        return torch.where(m, values, 0).sum(1, keepdim=True) / m.sum(1, keepdim=True)  # [B, 1, Dv]

    def attend(
        self, query: torch.Tensor, prepared: torch.Tensor, need_weights: bool = True
    ) -> tuple[torch.Tensor, None]:
        return prepared.expand(-1, query.size(1), -1), None


@register_attention("fixed_c")
class FixedContext(NoAttention):
    """One semantic code for every step (Cho et al. 2014): h_t = f(h_{t-1}, y_{t-1}, C), with
    C the encoder summary. `memory()` makes C the only slot, so attending to it returns C.
    """

    placement: ClassVar[str] = "fixed_c"

    def memory(
        self, states: torch.Tensor, summary: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        c = summary.unsqueeze(1)
        return c, c, torch.ones(c.shape[:2], dtype=torch.bool, device=c.device)


class ScoredAttention(Attention):
    """a_j = softmax_j(f(q, k_j)) over the unmasked keys (and j ≤ i when causal), c = Σ_j a_j v_j.

    The computation shared by Bahdanau and Luong attention; they differ only in where a decoder
    places it. Weights are [B, Tq, Tk]. It claims no capability itself: a plugin that subclasses it
    and overrides `attend` keeps the 2015 contract unless it declares more.
    """

    def __init__(
        self, query_dim: int, key_dim: int, value_dim: int, score: ScoreFactory | None = None
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim, score)
        self.score = self.make_score(score, query_dim, key_dim)

    def prepare(
        self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
    ) -> tuple[Any, torch.Tensor, torch.Tensor]:
        # zero padded values: their weight is 0, but 0·NaN would still poison the context
        return self.score.prepare(keys), values.masked_fill(~mask.unsqueeze(-1), 0), mask

    def state_size(self, n: int) -> int:
        """The masked values, n·value_dim, and the score's per-key work beyond the keys (which a site
        keeps)."""
        return n * self.value_dim + score_state(self.score, probe_keys(self, 1, n, self.key_dim))

    def attend(
        self,
        query: torch.Tensor,
        prepared: Any,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        keys, values, mask = prepared
        weights = masked_softmax(self.score.at(query, keys, positions), visible(mask.unsqueeze(1), positions))
        return weights @ values, weights if need_weights else None


class SoftmaxAttention(ScoredAttention):
    """`ScoredAttention` with the capabilities it has: any site, causal, positions passed on."""

    takes_positions: ClassVar[bool] = True
    causal: ClassVar[bool] = True
    position_free: ClassVar[bool] = True


@register_attention("additive", aliases=("bahdanau",))
class BahdanauAttention(SoftmaxAttention):
    """Bahdanau et al. 2015: c_i = Σ_j a_ij h_j with a_ij = softmax_j(f(s_{i-1}, h_j)); the
    context is computed from the previous decoder state *before* the RNN step and fed into it.
    """

    placement: ClassVar[str] = "before"
    default_score: ClassVar[str | None] = "additive"


@register_attention("dot", aliases=("luong",))
class LuongAttention(SoftmaxAttention):
    """Luong et al. 2015 (global attention): RNN step first, then c_t = Σ_s a_ts h̄_s with
    a_ts = softmax_s(f(h_t, h̄_s)) and attentional state h̃_t = tanh(W_c[c_t; h_t]).
    `input_feeding` feeds h̃_{t-1} into the next step's input (read by the decoder).
    """

    placement: ClassVar[str] = "after"
    default_score: ClassVar[str | None] = "dot"
    inert: ClassVar[dict[str, str]] = {"input_feeding": "the rnn decoder reads it: it feeds h̃_{t-1} back"}

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int,
        score: ScoreFactory | None = None,
        input_feeding: bool = True,
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim, score)
        self.input_feeding = input_feeding
