"""The attention contract: `Attention`, the base class of the `attention` kind, and what every mechanism
shares: `Mechanism` (a class waiting for a site's dims), `masked_softmax` and `visible` (the keys a query
may see), and the counting of decoding state (`stored`, `score_state`, `probe_keys`). The built-in
mechanisms are in `classic.py` (one head, 2014–2015) and `multihead.py` (H heads, 2017)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from attnx.nn.positions import Positions
from attnx.nn.scores import Score, ScoreFactory, build_score
from attnx.registry import registry

PLACEMENTS = ("none", "fixed_c", "before", "after")  # see Attention
WEIGHTS_ARE = ("distribution", "nonnegative", "signed")  # what a mechanism's weights may be (Attention)
QUERY_FREE = ("none", "fixed_c")  # the placements whose context is the same for every query
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


def hosts_attention(cls: type[Attention]) -> bool:
    """Whether a mechanism attends: its context depends on the query, as its `placement` declares (not
    `none`, Sutskever's mean of the values, nor `fixed_c`, Cho's one code for every step). What
    `attnx compare`'s discrimination rule counts as an attention arm."""
    return cls.placement not in QUERY_FREE


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """a = softmax(scores) over the last dim restricted to `mask` (True = real key).

    Masked keys get exactly 0 (exp(-inf)); a row with one real key gets exactly 1 there.
    scores [..., Tq, Tk], mask broadcastable to [..., 1, Tk]. Every row must have one real key.
    """
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def visible(mask: torch.Tensor, positions: Positions | None) -> torch.Tensor:
    """The key mask [B, 1, Tk] (or [B, 1, 1, Tk]), narrowed to j ≤ i when the positions are causal."""
    causal = None if positions is None else positions.visible()
    if causal is None:
        return mask
    return mask & causal.view(causal.size(0), *[1] * (mask.dim() - 3), *causal.shape[1:])


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
    no score (a config that gives it one is refused by `attnx.models.sites.resolve_score_name`).

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
