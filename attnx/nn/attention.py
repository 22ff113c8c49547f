"""Attention mechanisms: how a model turns scores into a context vector, and where it uses it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._pytree import tree_flatten

from attnx.nn.positions import Positions
from attnx.nn.scores import ScaledDotScore, Score, ScoreFactory, build_score
from attnx.registry import register_attention, registry

PLACEMENTS = ("none", "fixed_c", "before", "after")  # see Attention
WEIGHTS_ARE = ("distribution", "nonnegative", "signed")  # what a mechanism's weights may be (Attention)
CAPABILITIES = (
    "self_attention",
    "cross_attention",
    "causal",
    "takes_positions",
    "position_free",
    "incremental",
)


@dataclass(frozen=True)
class Mechanism:
    """An attention class with its score and hyperparameters, waiting for a site's dims:
    `Mechanism(cls, score, hyperparams)(query_dim, key_dim, value_dim)` builds it. A site reads the
    class's capability flags from `cls` before building."""

    cls: type[Attention]
    score: ScoreFactory | None = None
    hyperparams: dict[str, Any] = field(default_factory=dict)

    def __call__(self, query_dim: int, key_dim: int, value_dim: int) -> Attention:
        return self.cls(query_dim, key_dim, value_dim, self.score, **self.hyperparams)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """a = softmax(scores) over the last dim restricted to `mask` (True = real key).

    Masked keys get exactly 0 (exp(-inf)); a row with one real key gets exactly 1 there.
    scores [..., Tq, Tk], mask broadcastable to [..., 1, Tk]. Every row must have one real key.
    """
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def stored(tree: Any, given: Iterable[torch.Tensor] = ()) -> int:
    """Numbers held by the floating-point tensors in `tree` (nested tuples, lists, dicts): each storage
    once, and whole, since a view keeps all of its storage alive; the storages of `given` (a caller's
    tensors) left out. Masks and counters (bool, integer) are not state."""
    skip = {t.untyped_storage().data_ptr() for t in given}
    held = {}
    for leaf in tree_flatten(tree)[0]:
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            storage = leaf.untyped_storage()
            if storage.data_ptr() not in skip:
                held[storage.data_ptr()] = storage.nbytes() // leaf.element_size()
    return sum(held.values())


def score_state(score: Score, keys: torch.Tensor) -> int:
    """Numbers `score.prepare(keys)` keeps beyond the keys themselves: 0 for the identity of the dot
    scores, a copy's for per-key work (U·k of additive, cosine's normalised keys). Measured on `keys`,
    since only a score knows what its prepare returns."""
    with torch.no_grad():
        return stored(score.prepare(keys), given=(keys,))


def probe_keys(module: nn.Module, *shape: int) -> torch.Tensor:
    """Zeros of `shape` in the dtype and on the device of `module`'s parameters (torch's defaults when it
    has none): keys to measure a score's `prepare` with."""
    like = next(module.parameters(), None)
    if like is None:
        return torch.zeros(shape)
    return torch.zeros(shape, dtype=like.dtype, device=like.device)


class Attention(nn.Module):
    """Base class of the `attention` kind.

    `placement` tells a decoder where the mechanism acts (equations in `attnx/nn/decoders/rnn.py`):
      "none"    no context (Sutskever 2014); "fixed_c" one code C at every step (Cho 2014);
      "before"  context from s_{i-1}, fed into the RNN step (Bahdanau 2015);
      "after"   RNN step first, query h_t, attentional state tanh(W_c[c_t; h_t]) (Luong 2015).
    `default_score` is the score used when the user picks none; None means the mechanism takes
    no score (a config that gives it one is refused by `attnx.models.build.resolve_score_name`).

    Capabilities (as xformers' attention registry): what generic code (sites, the kit) may ask of it.
      self_attention   it can attend a sequence to itself (an encoder or decoder layer)
      cross_attention  it can attend queries to another sequence (a decoder's memory, pooling)
      takes_positions  `attend` takes `positions=` (`Positions`), and passes them to its score
      causal           under `positions.causal` query i sees only keys j ≤ i (implies takes_positions)
      position_free    permuting keys with their values permutes nothing in the output, and in self-
                       attention permuted inputs give permuted outputs (with a position-free score)
      incremental      `extend(prepared, keys, values, mask)` appends keys to what `prepare` made (a
                       decoder's key/value cache); otherwise a cache re-prepares its stored keys
    The defaults promise nothing beyond the 2015 contract: a plugin declares what it supports.

    `memory_growth` k: self-attention over N positions needs O(N^k) memory at most; 2 for the N×N
    weights of softmax attention, 1 for a mechanism that never builds them (`attnx bench` holds each row
    to the budget it implies). `state_size(n)`: what decoding keeps per sequence (MAD's and Zoology's
    state axis), which the kit's `state` check counts in a site's cache.

    `weights_are`: what the returned weights are, which the kit holds them to (`WEIGHTS_ARE`): a
    "distribution" over the keys each query sees (≥ 0, summing to 1: softmax), "nonnegative" (sigmoid or
    ReLU attention, not normalised) or "signed". `inert`: the constructor's hyperparameters that the
    mechanism itself does not read, with why (its host reads them); every other one must change what it
    computes (the kit's `hyperparameters` check).
    """

    placement: ClassVar[str] = "after"
    default_score: ClassVar[str | None] = "dot"
    self_attention: ClassVar[bool] = True
    cross_attention: ClassVar[bool] = True
    takes_positions: ClassVar[bool] = False
    causal: ClassVar[bool] = False
    position_free: ClassVar[bool] = False
    incremental: ClassVar[bool] = False
    memory_growth: ClassVar[int] = 2
    weights_are: ClassVar[str] = "distribution"
    inert: ClassVar[dict[str, str]] = {}

    def __init__(
        self, query_dim: int, key_dim: int, value_dim: int, score: ScoreFactory | None = None
    ) -> None:
        super().__init__()
        self.query_dim = query_dim
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.output_dim = value_dim  # dim of the returned context; subclasses may change it

    def make_score(
        self, score: ScoreFactory | None, query_dim: int, key_dim: int, num_heads: int = 1
    ) -> Score:
        """`score(query_dim, key_dim)`, or this mechanism's `default_score` when `score` is None;
        `num_heads` reaches a score whose constructor takes it."""
        if score is None:
            if self.default_score is None:
                raise TypeError(f"{type(self).__name__} takes no score (default_score = None)")
            score = registry("score").get(self.default_score)
        return build_score(score, query_dim, key_dim, num_heads)

    def memory(
        self, states: torch.Tensor, summary: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What the mechanism attends to, from an encoder's output: (keys, values, mask)."""
        return states, states, mask

    def prepare(self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> Any:
        """Per-sequence work on keys/values, done once before a decoder's time loop."""
        raise NotImplementedError

    def attend(
        self, query: torch.Tensor, prepared: Any, need_weights: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query [B, Tq, Dq] -> (context [B, Tq, output_dim], weights [B, (H,) Tq, Tk] or None).

        A mechanism that `takes_positions` adds `positions: Positions | None = None`."""
        raise NotImplementedError

    def extend(self, prepared: Any, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> Any:
        """`prepare` of the keys behind `prepared` followed by these [B, Tn, ·]; only when `incremental`.
        Every tensor in the result is batch-first, so a beam search can reorder the cache."""
        raise NotImplementedError(f"{type(self).__name__} is not incremental")

    def state_size(self, n: int) -> int | None:
        """Numbers (tensor elements, all heads) this mechanism keeps per sequence to decode the token after
        n tokens of causal self-attention: what its cache holds after `prepare` and `extend`s. None:
        undeclared (the default; the kit's `state` check fails a causal mechanism that leaves it so).

        A mechanism that is not `incremental` counts what `prepare` keeps beyond the keys and values it is
        given: a site keeps those n·D inputs itself, to re-prepare them (`KVCache.state_size`)."""
        return None

    def attend_at(
        self, query: torch.Tensor, prepared: Any, positions: Positions | None, need_weights: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`attend`, with the positions when the mechanism takes them: the call every site makes.
        A causal request to a mechanism that is not `causal` is refused, never silently ignored."""
        if positions is not None and positions.causal and not self.causal:
            raise ValueError(f"{type(self).__name__} is not causal; it cannot serve a causal site")
        if self.takes_positions or self.causal:  # causal needs the positions to know what is future
            attend: Callable[..., tuple[torch.Tensor, torch.Tensor | None]] = self.attend  # with positions=
            return attend(query, prepared, need_weights, positions=positions)
        return self.attend(query, prepared, need_weights)

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.attend_at(query, self.prepare(keys, values, mask), positions, need_weights)

    def reference(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`forward` written plainly from the mechanism's equation, with the same parameters: the slow
        formula a fast path must equal (the O(N²) matrix of a linear or banded mechanism). A plugin that
        overrides it is compared with it by the conformance kit (`reference` check); none by default."""
        raise NotImplementedError(f"{type(self).__name__} ships no reference")


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


def visible(mask: torch.Tensor, positions: Positions | None) -> torch.Tensor:
    """The key mask [B, 1, Tk] (or [B, 1, 1, Tk]), narrowed to j ≤ i when the positions are causal."""
    causal = None if positions is None else positions.visible()
    if causal is None:
        return mask
    return mask & causal.view(causal.size(0), *[1] * (mask.dim() - 3), *causal.shape[1:])


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
