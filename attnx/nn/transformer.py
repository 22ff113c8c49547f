"""Pre-LN Transformer blocks (Xiong et al. 2020) whose attention is any registered mechanism.

    self-attention block (encoder; causal: decoder-only):  x += SelfAttn(LN(x));  x += FFN(LN(x))
    decoder block:  x += CausalSelfAttn(LN(x));  x += CrossAttn(LN(x), memory);  x += FFN(LN(x))

An `AttentionSite` hosts one mechanism: it checks that the mechanism can serve the site's role
(its capability flags), projects the context back to d_model when the mechanism's output width
differs, and for causal self-attention keeps a key/value cache for decoding one token at a time.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._pytree import tree_map

from attnx.nn.attention import Attention, Mechanism
from attnx.nn.conv import ShortConvolution
from attnx.nn.positions import Positions

# What a role asks of a mechanism: the capability flags it must declare, and why.
REQUIRES = {
    "self": (("self_attention",), "a self-attention layer"),
    "causal": (("self_attention", "causal"), "a causal self-attention layer (a decoder's)"),
    "cross": (("cross_attention",), "cross-attention"),
}


def refusal(cls: type[Attention], role: str) -> str | None:
    """Why `cls` cannot serve `role`, or None when it can."""
    flags, site = REQUIRES[role]
    missing = [flag for flag in flags if not getattr(cls, flag)]
    if not missing:
        return None
    return f"{cls.__name__} cannot be {site}: it declares {' and '.join(f'{f} = False' for f in missing)}"


class KVCache(NamedTuple):
    """A causal self-attention site's past, per sequence: `prepare`'s result over the tokens so far and,
    for a mechanism that re-prepares (not `incremental`), the keys/values it attended to (its normed
    inputs, [B, t, D]) and their mask [B, t]; an incremental mechanism's cache is its own state alone
    (inputs and mask None), so one whose state does not grow decodes in constant memory."""

    inputs: torch.Tensor | None
    mask: torch.Tensor | None
    prepared: Any

    @staticmethod
    def state_size(mechanism: Attention, n: int) -> int | None:
        """Numbers per sequence a site's cache holds after n tokens of `mechanism`: its declared
        `Attention.state_size`, plus the n·key_dim inputs it re-prepares from when it is not incremental
        (None: undeclared)."""
        declared = mechanism.state_size(n)
        if declared is None or mechanism.incremental:
            return declared
        return declared + n * mechanism.key_dim

    def select(self, index: torch.Tensor) -> KVCache:
        """Reorder the batch (beam search): every tensor is batch-first by the contract."""
        return tree_map(lambda t: t.index_select(0, index) if isinstance(t, torch.Tensor) else t, self)


class AttentionSite(nn.Module):
    """One attention sublayer's mechanism, built as `mechanism(d_model, d_model, d_model)` for `role`
    ("self", "causal" or "cross"), its context mapped back to d_model."""

    def __init__(self, mechanism: Mechanism, d_model: int, role: str) -> None:
        super().__init__()
        why = refusal(mechanism.cls, role)
        if why is not None:
            raise ValueError(why)
        self.mechanism = mechanism(d_model, d_model, d_model)
        width = self.mechanism.output_dim
        self.out = nn.Identity() if width == d_model else nn.Linear(width, d_model, bias=False)

    def forward(
        self,
        query: torch.Tensor,
        prepared: Any,
        positions: Positions | None,
        need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        context, weights = self.mechanism.attend_at(query, prepared, positions, need_weights)
        return self.out(context), weights

    def prepare(self, states: torch.Tensor, mask: torch.Tensor) -> Any:
        return self.mechanism.prepare(states, states, mask)

    def cache(self, h: torch.Tensor, mask: torch.Tensor, cache: KVCache | None) -> KVCache:
        """The cache after appending h [B, Tn, D] (mask [B, Tn]): incremental mechanisms extend what
        they prepared, keeping nothing else; others re-prepare all stored keys, which re-runs no earlier
        layer or step."""
        if self.mechanism.incremental:
            if cache is None:
                return KVCache(None, None, self.prepare(h, mask))
            return KVCache(None, None, self.mechanism.extend(cache.prepared, h, h, mask))
        if cache is not None:
            assert cache.inputs is not None and cache.mask is not None  # kept for re-preparing
            h, mask = torch.cat([cache.inputs, h], dim=1), torch.cat([cache.mask, mask], dim=1)
        return KVCache(h, mask, self.prepare(h, mask))


class FeedForward(nn.Sequential):
    """FFN(x) = W₂ dropout(GELU(W₁ x + b₁)) + b₂ (GELU: Hendrycks & Gimpel 2016, as in BERT and GPT)."""

    def __init__(self, d_model: int, ff_dim: int, dropout: float) -> None:
        super().__init__(
            nn.Linear(d_model, ff_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(ff_dim, d_model)
        )


class SwiGLU(nn.Module):
    """FFN(x) = W₂ dropout(SiLU(W₁ x) ⊙ W₃ x), without biases (Shazeer 2020, "GLU Variants Improve
    Transformer"; SiLU = Swish₁, x·σ(x)): the MLP that MAD's models interleave with their mixers. Three
    d_model × ff_dim matrices where GELU's FFN has two."""

    def __init__(self, d_model: int, ff_dim: int, dropout: float) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, ff_dim, bias=False)
        self.w3 = nn.Linear(d_model, ff_dim, bias=False)
        self.w2 = nn.Linear(ff_dim, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(self.dropout(F.silu(self.w1(x)) * self.w3(x)))


FEED_FORWARDS: dict[str, type[FeedForward | SwiGLU]] = {"gelu": FeedForward, "swiglu": SwiGLU}


def feed_forward(kind: str, d_model: int, ff_dim: int, dropout: float) -> FeedForward | SwiGLU | None:
    """The feed-forward sublayer named `kind` (a key of FEED_FORWARDS), None when `ff_dim` = 0 (the kind
    is checked either way, so a mistyped name never passes unnoticed)."""
    if kind not in FEED_FORWARDS:
        raise ValueError(f"ff must be one of {', '.join(FEED_FORWARDS)}; got ff={kind!r}")
    return FEED_FORWARDS[kind](d_model, ff_dim, dropout) if ff_dim else None


class BlockState(NamedTuple):
    """A causal `SelfAttentionBlock`'s decoding state: its site's `KVCache` and, with a short
    convolution, its last k−1 normed inputs (None without one)."""

    cache: KVCache
    conv: torch.Tensor | None

    def select(self, index: torch.Tensor) -> BlockState:
        """Reorder the batch (beam search, sampling several continuations)."""
        conv = None if self.conv is None else self.conv.index_select(0, index)
        return BlockState(self.cache.select(index), conv)


class SelfAttentionBlock(nn.Module):
    """x += SelfAttn(Conv(LN(x))); x += FFN(LN(x)): an encoder's block attending both ways, or with `causal`
    a decoder-only model's (GPT's block). `ff_dim` = 0 leaves out the feed-forward sublayer (attention-only
    models, as in Zoology's recall experiments); `ff` chooses it (FEED_FORWARDS: gelu, swiglu). `conv` = k
    > 0 puts a short causal convolution of kernel k (attnx.nn.conv, Zoology's) on the mechanism's input,
    so its queries, keys and values each see the last k tokens; 0 (the default) puts none."""

    ff: FeedForward | SwiGLU | None
    conv: ShortConvolution | None

    def __init__(
        self,
        d_model: int,
        attention: Mechanism,
        ff_dim: int,
        dropout: float,
        causal: bool = False,
        ff: str = "gelu",
        conv: int = 0,
    ) -> None:
        super().__init__()
        self.norm_attn = nn.LayerNorm(d_model)
        self.conv = ShortConvolution(d_model, conv) if conv else None
        self.attention = AttentionSite(attention, d_model, "causal" if causal else "self")
        self.ff = feed_forward(ff, d_model, ff_dim, dropout)
        if self.ff is not None:
            self.norm_ff = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor, positions: Positions, need_weights: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = self.norm_attn(x)
        if self.conv is not None:
            h, _ = self.conv(h)
        context, weights = self.attention(h, self.attention.prepare(h, mask), positions, need_weights)
        return self._feed_forward(x + self.dropout(context)), weights

    def decode(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        positions: Positions,
        state: BlockState | None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, BlockState, torch.Tensor | None]:
        """x [B, Tn, D] at the positions after `state` (None: from 0) -> (x, the state with x appended,
        weights): a prompt's prefill passes it whole with state None, a decoding step one token. A causal
        block's `forward` over the whole sequence equals the steps."""
        h = self.norm_attn(x)
        conv = None
        if self.conv is not None:
            h, conv = self.conv(h, None if state is None else state.conv)
        cache = self.attention.cache(h, mask, None if state is None else state.cache)
        context, weights = self.attention(h, cache.prepared, positions, need_weights)
        return self._feed_forward(x + self.dropout(context)), BlockState(cache, conv), weights

    def _feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ff is None:
            return x
        return x + self.dropout(self.ff(self.norm_ff(x)))

    def state_size(self, n: int) -> int | None:
        """Numbers a causal block's decoding state holds per sequence after n tokens: its site's cache
        (`KVCache.state_size`; None when the mechanism declares none) plus the convolution's k−1 inputs."""
        cached = KVCache.state_size(self.attention.mechanism, n)
        if cached is None:
            return None
        return cached + (0 if self.conv is None else self.conv.state_size())


class DecoderBlock(nn.Module):
    """x += CausalSelfAttn(LN(x)); x += CrossAttn(LN(x), memory); x += FFN(LN(x))."""

    def __init__(
        self,
        d_model: int,
        self_attention: Mechanism,
        cross_attention: Mechanism,
        ff_dim: int,
        dropout: float,
    ) -> None:
        super().__init__()
        self.norm_self = nn.LayerNorm(d_model)
        self.self_attention = AttentionSite(self_attention, d_model, "causal")
        self.norm_cross = nn.LayerNorm(d_model)
        self.cross_attention = AttentionSite(cross_attention, d_model, "cross")
        self.norm_ff = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, ff_dim, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        cache: KVCache | None,
        memory: Any,
        positions: tuple[Positions, Positions],
        need_weights: bool,
    ) -> tuple[torch.Tensor, KVCache, torch.Tensor | None, torch.Tensor | None]:
        """x [B, Tn, D] at the positions after `cache` (None: from 0) -> (x, cache with x's keys
        appended, self-attention weights, cross-attention weights). Teacher forcing passes the whole
        target with cache None; a decoding step passes one token and the cache so far."""
        self_positions, cross_positions = positions
        h = self.norm_self(x)
        cache = self.self_attention.cache(h, mask, cache)
        context, self_weights = self.self_attention(h, cache.prepared, self_positions, need_weights)
        x = x + self.dropout(context)
        context, cross_weights = self.cross_attention(
            self.norm_cross(x), memory, cross_positions, need_weights
        )
        x = x + self.dropout(context)
        return x + self.dropout(self.ff(self.norm_ff(x))), cache, self_weights, cross_weights
