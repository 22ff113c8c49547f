"""Retention (Sun et al. 2023, "Retentive Network: A Successor to Transformer for Large Language Models"):
linear attention without a normaliser whose state forgets at a fixed rate per head,

    S_t = γ_h S_{t−1} + k_tᵀ v_t,   o_t = q_t S_t,   γ_h = 1 − 2^(−5−h)   (h = 0 .. H − 1)

that is o = (Q Kᵀ ⊙ D) V with D_ij = γ^(i−j) for j ≤ i, 0 after: the matrix A = Q Kᵀ ⊙ D is the linear map
the values go through, signed and not normalised (the paper's parallel form), which `need_weights`
returns. q = x W^Q / √d, k = x W^K, v = x W^V in H heads of d = D / H, and the heads' outputs are
normalised and gated as the paper's MSR layer does, (swish(x W^G) ⊙ RMSNorm(o)) W^O, with RMSNorm in
place of its GroupNorm as flash-linear-attention's `MultiScaleRetention` has it (eps 1e-5). The xPos
rotation of q and k is left out: here positions act through the decay alone.

`DecayedLinearAttention` holds the mechanism for any decay α_t ∈ (0, 1]^{d_k} given by `log_decay`, S_t =
diag(α_t) S_{t−1} + k_tᵀ v_t, A_ij = Σ_f q_if k_jf Π_{j<l≤i} α_lf; Retention's is the constant γ_h,
GLA's (contrib/gla.py) a gate computed from the token. Self-attention runs in chunks of C tokens, as
`linear`'s causal form does: the state S carried across chunks, the C×C products inside one with their
decays written out (Π α as exp of a difference of log-sums, never the reciprocal of a product, which
overflows). Decoding is the recurrence: the cache holds the keys while they are the smaller form, then
S alone, H·d_k·d_v numbers per sequence however long. A recurrence reads left to right, so the map is
causal at every site, a bidirectional one (an encoder) included.

    attnx train task=mqar attention=retnet attention.num_heads=2
"""

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from attnx import HeadsAttention, Positions, ScoreFactory, register_attention

# tokens per chunk of the causal form: its decays are [C, C, d_k] per chunk and head
CHUNK = 16
NORM_EPS = 1e-5  # flash-linear-attention's norm_eps


class Keys(NamedTuple):
    """`prepare`'s per-key cache: k [B, H, T, d_k], v [B, H, T, d_v], log α [B, H, T, g] (0 at padding,
    g = 1 for a decay per head), the mask [B, T]."""

    keys: torch.Tensor
    values: torch.Tensor
    log_decay: torch.Tensor
    mask: torch.Tensor


class DecayState(NamedTuple):
    """The recurrent cache: S [B, H, d_k, d_v] after every key so far, for a query after them."""

    summed: torch.Tensor


def chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, log_a: torch.Tensor) -> torch.Tensor:
    """o_i = Σ_{j ≤ i} (q_i · (Π_{j<l≤i} α_l ⊙ k_j)) v_j by index, [B, H, N, d_v], in chunks of CHUNK: earlier
    chunks through S (decayed to each query), its own chunk through the explicit C×C matrix."""
    n, pad = q.size(2), -q.size(2) % CHUNK
    if pad:  # zero keys with α = 1 add nothing and forget nothing; padded queries are cut off below
        q, k, v, log_a = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v, log_a))
    q, k, v, log_a = (x.unflatten(2, (-1, CHUNK)) for x in (q, k, v, log_a))  # [B, H, N/C, C, ·]
    b = log_a.cumsum(-2)  # log Π α from the chunk's start to each token
    later = torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device).triu(1)[..., None]
    decay = (b[..., :, None, :] - b[..., None, :, :]).masked_fill(later, -math.inf).exp()  # [.., C, C, g]
    inside = (q[..., :, None, :] * k[..., None, :, :] * decay).sum(-1) @ v
    state = q.new_zeros(*q.shape[:2], q.size(-1), v.size(-1))
    out = []
    for c in range(q.size(2)):
        last = b[:, :, c, -1:]  # [B, H, 1, g]
        out.append(inside[:, :, c] + (q[:, :, c] * b[:, :, c].exp()) @ state)
        state = (
            last.exp().transpose(-1, -2) * state
            + (k[:, :, c] * (last - b[:, :, c]).exp()).transpose(-1, -2) @ v[:, :, c]
        )
    return torch.stack(out, 2).flatten(2, 3)[:, :, :n]


class DecayedLinearAttention(HeadsAttention):
    """The mechanism for a decay α_t that a subclass gives (`log_decay`, and `gate_width`, its g); see the
    module's docstring. Not registered: `retnet` and `gla` are."""

    default_score = None
    cross_attention = False
    causal = True
    takes_positions = True
    incremental = True
    memory_growth = 1
    weights_are = "signed"

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int,
        score: ScoreFactory | None = None,
        num_heads: int = 4,
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim, score, num_heads)
        self.W_g = nn.Linear(query_dim, query_dim, bias=False)
        self.norm_weight = nn.Parameter(torch.ones(self.head_dim))  # RMSNorm's, shared by the heads

    @property
    def gate_width(self) -> int:
        """g: the numbers α_t has per head (1: one rate per head; d_k: one per key feature)."""
        raise NotImplementedError

    def log_decay(self, keys: torch.Tensor) -> torch.Tensor:
        """log α_t ≤ 0 of each key token, [B, H, T, g]."""
        raise NotImplementedError

    def state_size(self, n: int) -> int:
        """H · (the first token's k, v, log α; then the smaller of n tokens' and S, d_k·d_v)."""
        d = self.head_dim
        per_key, state = 2 * d + self.gate_width, d * d
        return self.num_heads * (min(n * per_key, state) if n > 1 else per_key)

    def prepare(self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> Keys:
        k, v = self.key_value_heads(keys, values, mask)  # 0 at padding
        log_a = self.log_decay(keys.masked_fill(~mask[..., None], 0))
        return Keys(k, v, log_a.masked_fill(~mask[:, None, :, None], 0), mask)

    def extend(
        self, prepared: Keys | DecayState, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
    ) -> Keys | DecayState:
        new = self.prepare(keys, values, mask)
        if isinstance(prepared, DecayState):
            return DecayState(self.advanced(prepared.summed, new))
        joined = Keys(*(torch.cat(pair, 2 if pair[0].dim() == 4 else 1) for pair in zip(prepared, new)))
        if joined.mask.size(1) * (2 * self.head_dim + self.gate_width) <= self.head_dim**2:
            return joined  # the keys are still the smaller cache
        empty = joined.keys.new_zeros(*joined.keys.shape[:2], self.head_dim, self.head_dim)
        return DecayState(self.advanced(empty, joined))

    def advanced(self, state: torch.Tensor, keys: Keys) -> torch.Tensor:
        """S after the keys, one at a time: S ← diag(α_t) S + k_tᵀ v_t."""
        for t in range(keys.mask.size(1)):
            k, v, log_a = keys.keys[:, :, t, :, None], keys.values[:, :, t, None], keys.log_decay[:, :, t]
            state = log_a.exp()[..., None] * state + k @ v
        return state

    def attend(
        self,
        query: torch.Tensor,
        prepared: Keys | DecayState,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if positions is None:
            raise ValueError(f"{type(self).__name__} needs positions: query i reads the keys up to its own")
        q = self._split(self.W_q(query)) / math.sqrt(self.head_dim)
        if isinstance(prepared, DecayState):
            if query.size(1) > 1:
                raise ValueError(
                    f"{type(self).__name__}'s recurrent state answers one query at a time, got "
                    f"{query.size(1)}: it holds the keys' decayed sum, not their order"
                )
            return self.output(query, q @ prepared.summed), None
        k, v, log_a, mask = prepared
        if need_weights or not positions.aligned():
            weights = self.explicit(q, k, log_a, mask[:, None] & (positions.relative() <= 0))
            return self.output(query, weights @ v), weights if need_weights else None
        return self.output(query, chunked(q, k, v, log_a)), None

    def explicit(
        self, q: torch.Tensor, k: torch.Tensor, log_a: torch.Tensor, seen: torch.Tensor
    ) -> torch.Tensor:
        """A_ij = Σ_f q_if k_jf Π α_lf over the keys l after j up to the query's latest, [B, H, Tq, Tk]."""
        total = log_a.cumsum(2)  # log Π α up to each key; its minimum over a query's keys is at its latest
        seen = seen[:, None, :, :, None]
        latest = torch.where(seen, total[:, :, None], math.inf).amin(3, keepdim=True)  # [B, H, Tq, 1, g]
        decay = (latest - total[:, :, None]).masked_fill(~seen, -math.inf).exp()
        return (q[:, :, :, None] * k[:, :, None] * decay).sum(-1)

    def output(self, query: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """(swish(x W^G) ⊙ [RMSNorm(o_1); ...; RMSNorm(o_H)]) W^O from the heads' o [B, H, Tq, d_v]."""
        # written out: torch's rms_norm warns under bfloat16 autocast (its float32 weight), then does this
        normed = heads * torch.rsqrt(heads.pow(2).mean(-1, keepdim=True) + NORM_EPS) * self.norm_weight
        return self.W_o(F.silu(self.W_g(query)) * normed.transpose(1, 2).flatten(2))

    def reference(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The recurrence token by token, for self-attention (query t is token t): S_t = diag(α_t) S_{t−1} +
        k_tᵀ v_t, o_t = q_t S_t, and row t of A as q_t · K̃_t with K̃_t = diag(α_t) K̃_{t−1} ∪ {k_t}, the
        keys decayed so far; padding a step that keeps both. Shares `log_decay` (the decay's parametrisation)
        and the weights with forward, nothing of its chunks, cumulative sums or caches."""
        real = mask[..., None]
        batch, n = query.shape[:2]

        def heads(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return (x @ w.T).reshape(batch, n, self.num_heads, -1).transpose(1, 2)

        x = torch.where(real, keys, 0)
        q = heads(query, self.W_q.weight) / math.sqrt(self.head_dim)
        k, v = heads(x, self.W_k.weight), heads(torch.where(real, values, 0), self.W_v.weight)
        alpha = torch.where(mask[:, None, :, None], self.log_decay(x).exp(), 1.0)
        state = q.new_zeros(batch, self.num_heads, self.head_dim, self.head_dim)
        decayed = q.new_zeros(batch, self.num_heads, 0, self.head_dim)
        outs, rows = [], []
        for t in range(n):
            state = alpha[:, :, t, :, None] * state + k[:, :, t, :, None] * v[:, :, t, None]
            decayed = torch.cat([alpha[:, :, t, None] * decayed, k[:, :, t, None]], 2)
            outs.append((q[:, :, t, None] @ state)[:, :, 0])
            rows.append(F.pad(decayed @ q[:, :, t, :, None], (0, 0, 0, n - t - 1))[..., 0])
        o = torch.stack(outs, 2)
        o = o / (o.pow(2).mean(-1, keepdim=True) + NORM_EPS).sqrt() * self.norm_weight
        gate = F.silu(query @ self.W_g.weight.T)
        out = (gate * o.transpose(1, 2).reshape(batch, n, -1)) @ self.W_o.weight.T + self.W_o.bias
        return out, torch.stack(rows, 2) * mask[:, None, None, :] if need_weights else None


@register_attention("retnet")
class Retention(DecayedLinearAttention):
    """RetNet's retention: α_t = γ_h for every token, γ_h = 1 − 2^(−5−h) (a buffer, not learnt)."""

    log_gamma: torch.Tensor

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """`DecayedLinearAttention`'s arguments (num_heads), which its config lists too."""
        super().__init__(*args, **kwargs)
        gamma = 1 - 2.0 ** (-5 - torch.arange(self.num_heads, dtype=torch.float64))
        self.register_buffer("log_gamma", gamma.log().float(), persistent=False)

    @property
    def gate_width(self) -> int:
        return 1

    def log_decay(self, keys: torch.Tensor) -> torch.Tensor:
        return self.log_gamma.to(keys.dtype)[:, None, None].expand(keys.size(0), -1, keys.size(1), 1)
