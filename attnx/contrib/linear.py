"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs: Fast Autoregressive Transformers
with Linear Attention"): softmax's exp(q·k) replaced by a kernel φ(q)·φ(k), φ(x) = elu(x) + 1 > 0, so that
per head

    out_i = φ(q_i)ᵀ S_i / φ(q_i)ᵀ z_i,   S_i = Σ_{visible j} φ(k_j) v_jᵀ,   z_i = Σ_{visible j} φ(k_j)

costs O(N·d²) instead of softmax's O(N²·d): S and z are sums that every query shares (all keys), or
prefix sums (causal). It is the attention matrix A_ij = φ(q_i)·φ(k_j) / Σ_{visible j'} φ(q_i)·φ(k_j')
applied to V, which `need_weights=True` returns. Decoding is the paper's RNN: the cache becomes the state
(S, z) once that is smaller than the keys themselves, and a step adds one key to it, O(d²) per token.

    attnx train encoder=self_attn encoder/attention=linear decoder=transformer decoder/attention=linear
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F

from attnx import HeadsAttention, Positions, register_attention, visible

# queries per chunk of the causal prefix-sum form: C×C products inside a chunk, d×d states across chunks;
# at d = 16 per head on a CPU, 16 and 32 ran within 10 % of each other and 64 a quarter slower (benchmarks/)
CHUNK = 32

Keys = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # prepare's per-key form: φ(K), V, mask


class LinearState(NamedTuple):
    """The recurrent form of a decoding cache: S' = Σ_j φ(k_j) [v_j; 1]ᵀ over the real keys so far,
    [B, H, F, d + 1] (S and z side by side), for a query after all of them."""

    summed: torch.Tensor


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1: positive, so every visible key gets a positive weight.

    Written as x + 1 (x > 0) or eˣ: elu's (eˣ − 1) + 1 rounds eˣ < 2⁻²⁴ to 0 in float32, so a key far on
    the negative side weighs exactly nothing there and 0/0 follows (the kit's precision check)."""
    return torch.where(x > 0, x + 1, x.clamp(max=0).exp())  # clamp: exp of the unused branch may be inf


def normalised(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    # φ > 0 makes the denominator positive, but exp underflows to 0 for very negative inputs: keep 0/0 out
    return numerator / denominator.clamp_min(torch.finfo(denominator.dtype).tiny)


def with_ones(v: torch.Tensor) -> torch.Tensor:
    """[v, 1]: the ones column carries z through every product, so one matmul gives φ(q)ᵀS and φ(q)ᵀz."""
    return torch.cat([v, torch.ones_like(v[..., :1])], -1)


def summed(phi_k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """S' = φ(K)ᵀ [V, 1] = [S, z] over the keys given, [B, H, F, d + 1]; a key with φ = 0 adds nothing."""
    return phi_k.transpose(-1, -2) @ with_ones(v)


def causal_linear(phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor, chunk: int) -> torch.Tensor:
    """φ(q_i)ᵀ [S_i, z_i] over keys j ≤ i, query i and key i at the same index: [B, H, N, d_v + 1], the
    numerator and the denominator side by side.

    Chunks of C positions: a query sees the earlier chunks through their summed states (an exclusive
    prefix sum of per-chunk φ(K_c)ᵀ [V_c, 1]) and its own chunk through the lower triangle of the C×C
    products. O(N·C·d + N·d²) time, O(N·C + (N/C)·d²) memory: never N×N. A sequence short enough that
    its N×N products cost no more than the chunks' (N·(F + d) ≤ C·(F + d) + 2·F·d per query, F = φ's
    width: N ≤ 137 for Based's 273 features at d = 64) is one chunk with no state, Zoology's "quadratic"
    training view of Based: 3.8x faster there on a CPU (benchmarks/README.md §17).
    """
    n, pad = phi_q.size(-2), -phi_q.size(-2) % chunk
    v = with_ones(v)
    width = phi_q.size(-1) + v.size(-1)
    if n * width <= chunk * width + 2 * phi_q.size(-1) * v.size(-1):
        return (phi_q @ phi_k.transpose(-1, -2)).tril() @ v
    if pad:  # zero rows: a padded key adds nothing to any state, and padded queries' rows are cut off below
        phi_q, phi_k, v = (F.pad(x, (0, 0, 0, pad)) for x in (phi_q, phi_k, v))
    phi_q, phi_k, v = (x.unflatten(-2, (-1, chunk)) for x in (phi_q, phi_k, v))  # [B, H, N/C, C, ·]
    states = phi_k.transpose(-1, -2) @ v  # per chunk
    states = states.cumsum(2) - states  # exclusive prefix sum: chunk c sees chunks 0..c-1
    out = phi_q @ states + (phi_q @ phi_k.transpose(-1, -2)).tril() @ v
    return out.flatten(2, 3)[:, :, :n]


@register_attention("linear")
class LinearAttention(HeadsAttention):
    """Multi-head linear attention: head_h = the kernel attention above on q W_h^Q, K W_h^K, V W_h^V,
    output = [head_1; ...; head_H] W^O, d = query_dim / H per head. Takes no score: φ is its similarity.

    Three paths compute the same output: one state S' shared by every query when nothing is causal
    (encoders, cross-attention, pooling; positions may be None); the chunked prefix sum for causal
    self-attention over aligned positions; the explicit Tq×Tk matrix for other causal shapes (a decoding
    step over a short cache) and whenever the weights are asked for.

    Incremental: `prepare` keeps φ(K W^K) and V W^V, F + d numbers per key and head; `extend` appends to
    them while that is no more than the state S', F·(d + 1), and turns the cache into S' (`LinearState`)
    after, adding each new key to it. A step from the state answers one query after every key in it, in
    O(F·d) and constant memory; it holds no keys, so it returns no weights.

    Subclasses change the kernel alone: `phi` (and `features`, its width per head), the projections W^Q
    and W^K (any width H·f), `normalised` and `eps`, and `kernel`, the reference's own; everything else is
    shared.
    """

    default_score = None
    self_attention = True
    cross_attention = True
    causal = True
    takes_positions = True
    position_free = True
    incremental = True
    memory_growth = 1
    eps = 0.0  # ε in the normaliser φ(q)ᵀz + ε (the fast paths keep 0/0 out their own way)

    @property
    def features(self) -> int:
        """F: the width of φ(q) and φ(k) per head."""
        return self.head_dim

    def phi(self, x: torch.Tensor) -> torch.Tensor:
        return feature_map(x)

    def normalised(self, numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
        return normalised(numerator, denominator)

    def kernel(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """φ(q_i)·φ(k_j) for every pair, [B, H, Tq, Tk], with φ(x) = elu(x) + 1 as the paper writes it: the
        reference's, apart from `phi` (a subclass that changes the kernel writes both)."""
        return (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-1, -2)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, H·w] -> [B, H, T, w], for the queries' and keys' width f as for the values' d."""
        return x.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)

    def state_size(self, n: int) -> int:
        """H · min(n·(F + d), F·(d + 1)): the keys while they are fewer numbers than S', then S'."""
        f, d = self.features, self.head_dim
        return self.num_heads * min(n * (f + d), f * (d + 1))

    def prepare(self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> Keys:
        """(φ(K W^K) [B, H, Tk, F], V W^V [B, H, Tk, d], mask [B, 1, 1, Tk]), 0 at padded keys."""
        k, v = self.key_value_heads(keys, values, mask)
        padded = ~mask[:, None, :, None]
        phi_k = self.phi(k).masked_fill(padded, 0)  # φ(0) ≠ 0: a padded key must weigh nothing
        return phi_k, v, mask[:, None, None, :]

    def extend(
        self, prepared: Keys | LinearState, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
    ) -> Keys | LinearState:
        phi_k, v, m = self.prepare(keys, values, mask)
        if isinstance(prepared, LinearState):
            return LinearState(prepared.summed + summed(phi_k, v))
        phi_k, v, m = (torch.cat(pair, dim) for pair, dim in zip(zip(prepared, (phi_k, v, m)), (2, 2, -1)))
        if phi_k.size(2) * (self.features + self.head_dim) <= self.features * (self.head_dim + 1):
            return phi_k, v, m  # the keys are still the smaller cache
        return LinearState(summed(phi_k, v))  # padded keys have φ = 0: the sum holds the real ones

    def attend(
        self,
        query: torch.Tensor,
        prepared: Keys | LinearState,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        phi_q = self.phi(self._split(self.W_q(query)))
        causal = positions is not None and positions.causal
        if isinstance(prepared, LinearState):
            if causal and query.size(1) > 1:
                raise ValueError(
                    f"{type(self).__name__}'s recurrent state answers one causal query at a time, got "
                    f"{query.size(1)}: it holds the keys' sum, not their order"
                )
            return self._merge(self.read(phi_q @ prepared.summed)), None
        phi_k, values, mask = prepared
        if need_weights or (causal and positions is not None and not positions.aligned()):
            a = (phi_q @ phi_k.transpose(-1, -2)).masked_fill(~visible(mask, positions), 0)
            weights = self.normalised(a, a.sum(-1, keepdim=True))
            return self._merge(weights @ values), weights if need_weights else None
        if causal:
            return self._merge(self.read(causal_linear(phi_q, phi_k, values, CHUNK))), None
        return self._merge(self.read(phi_q @ summed(phi_k, values))), None

    def read(self, out: torch.Tensor) -> torch.Tensor:
        """φ(q)ᵀS / φ(q)ᵀz from φ(q)ᵀ [S, z], [..., d + 1]."""
        return self.normalised(out[..., :-1], out[..., -1:])

    def reference(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A_ij = κ(q_i, k_j) / (Σ_{j' ∈ V(i)} κ(q_i, k_j') + ε) for j ∈ V(i), 0 elsewhere, per head, with the
        kernel κ = φ·φ (`kernel`) and ε = `eps`; V(i) = the real keys, at positions ≤ i's when causal. Output
        [A_1 V_1; ...; A_H V_H] W^O, weights A. The explicit Tq×Tk matrix from the equation alone: it shares
        no helper with the fast paths (projections, heads, φ, the normaliser), so a bug in one shows."""
        real = mask[..., None]

        def heads(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            """x Wᵀ split into the heads, [B, H, T, ·]."""
            return (x @ w.T).reshape(x.size(0), x.size(1), self.num_heads, -1).transpose(1, 2)

        q = heads(query, self.W_q.weight)
        k = heads(torch.where(real, keys, 0), self.W_k.weight)
        v = heads(torch.where(real, values, 0), self.W_v.weight)
        seen = mask[:, None, None, :]
        if positions is not None and positions.causal:
            seen = seen & (positions.key[:, None, None, :] <= positions.query[:, None, :, None])
        a = torch.where(seen, self.kernel(q, k), 0)
        a = a / (a.sum(-1, keepdim=True) + self.eps)
        out = (a @ v).transpose(1, 2).reshape(query.size(0), query.size(1), -1)
        return out @ self.W_o.weight.T + self.W_o.bias, a if need_weights else None
