"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs: Fast Autoregressive Transformers
with Linear Attention"): softmax's exp(q·k) replaced by a kernel φ(q)·φ(k), φ(x) = elu(x) + 1 > 0, so that
per head

    out_i = φ(q_i)ᵀ S_i / φ(q_i)ᵀ z_i,   S_i = Σ_{visible j} φ(k_j) v_jᵀ,   z_i = Σ_{visible j} φ(k_j)

costs O(N·d²) instead of softmax's O(N²·d): S and z are sums that every query shares (all keys), or
prefix sums (causal). It is the attention matrix A_ij = φ(q_i)·φ(k_j) / Σ_{visible j'} φ(q_i)·φ(k_j')
applied to V, which `need_weights=True` returns.

    attnx train encoder=self_attn encoder/attention=linear decoder=transformer decoder/attention=linear
"""

import torch
import torch.nn.functional as F

from attnx import HeadsAttention, Positions, register_attention, visible

# queries per chunk of the causal prefix-sum form: C×C products inside a chunk, d×d states across chunks;
# at d = 16 per head on a CPU, 16 and 32 ran within 10 % of each other and 64 a quarter slower (benchmarks/)
CHUNK = 32


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1: positive, so every visible key gets a positive weight.

    Written as x + 1 (x > 0) or eˣ: elu's (eˣ − 1) + 1 rounds eˣ < 2⁻²⁴ to 0 in float32, so a key far on
    the negative side weighs exactly nothing there and 0/0 follows (the kit's precision check)."""
    return torch.where(x > 0, x + 1, x.clamp(max=0).exp())  # clamp: exp of the unused branch may be inf


def normalised(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    # φ > 0 makes the denominator positive, but exp underflows to 0 for very negative inputs: keep 0/0 out
    return numerator / denominator.clamp_min(torch.finfo(denominator.dtype).tiny)


def kernel_weights(phi_q: torch.Tensor, phi_k: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
    """A_ij = φ(q_i)·φ(k_j) / Σ_{visible j'} φ(q_i)·φ(k_j'), 0 where `seen` is False: [B, H, Tq, Tk]."""
    a = (phi_q @ phi_k.transpose(-1, -2)).masked_fill(~seen, 0)
    return normalised(a, a.sum(-1, keepdim=True))


def with_ones(v: torch.Tensor) -> torch.Tensor:
    """[v, 1]: the ones column carries z through every product, so one matmul gives φ(q)ᵀS and φ(q)ᵀz."""
    return torch.cat([v, torch.ones_like(v[..., :1])], -1)


def global_linear(phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """out_i = φ(q_i)ᵀ S / φ(q_i)ᵀ z with S = φ(K)ᵀ V [d, d_v] and z = Σ_j φ(k_j) over all keys."""
    out = phi_q @ (phi_k.transpose(-1, -2) @ with_ones(v))
    return normalised(out[..., :-1], out[..., -1:])


def causal_linear(phi_q: torch.Tensor, phi_k: torch.Tensor, v: torch.Tensor, chunk: int) -> torch.Tensor:
    """out_i with S_i, z_i over keys j ≤ i, query i and key i at the same index: [B, H, N, d_v].

    Chunks of C positions: a query sees the earlier chunks through their summed states (an exclusive
    prefix sum of per-chunk φ(K_c)ᵀ [V_c, 1]) and its own chunk through the lower triangle of the C×C
    products. O(N·C·d + N·d²) time, O(N·C + (N/C)·d²) memory: never N×N.
    """
    n, pad = phi_q.size(-2), -phi_q.size(-2) % chunk
    v = with_ones(v)
    if pad:  # zero rows: a padded key adds nothing to any state, and padded queries' rows are cut off below
        phi_q, phi_k, v = (F.pad(x, (0, 0, 0, pad)) for x in (phi_q, phi_k, v))
    phi_q, phi_k, v = (x.unflatten(-2, (-1, chunk)) for x in (phi_q, phi_k, v))  # [B, H, N/C, C, ·]
    states = phi_k.transpose(-1, -2) @ v  # per chunk
    states = states.cumsum(2) - states  # exclusive prefix sum: chunk c sees chunks 0..c-1
    out = phi_q @ states + (phi_q @ phi_k.transpose(-1, -2)).tril() @ v
    out = out.flatten(2, 3)[:, :, :n]
    return normalised(out[..., :-1], out[..., -1:])


@register_attention("linear")
class LinearAttention(HeadsAttention):
    """Multi-head linear attention: head_h = the kernel attention above on q W_h^Q, K W_h^K, V W_h^V,
    output = [head_1; ...; head_H] W^O, d = query_dim / H per head. Takes no score: φ is its similarity.

    Three paths compute the same output: one d×d state shared by every query when nothing is causal
    (encoders, cross-attention, pooling; positions may be None); the chunked prefix sum for causal
    self-attention over aligned positions; the explicit Tq×Tk matrix for other causal shapes (a decoding
    step, Tq = 1, is O(Tk)) and whenever the weights are asked for. Incremental: a cache keeps φ(K W^K)
    and V W^V.
    """

    default_score = None
    self_attention = True
    cross_attention = True
    causal = True
    takes_positions = True
    position_free = True
    incremental = True
    memory_growth = 1

    def prepare(
        self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(φ(K W^K) [B, H, Tk, d], V W^V [B, H, Tk, d], mask [B, 1, 1, Tk]), 0 at padded keys."""
        k, v = self.key_value_heads(keys, values, mask)
        padded = ~mask[:, None, :, None]
        phi_k = feature_map(k).masked_fill(padded, 0)  # φ(0) = 1: a padded key must weigh nothing
        return phi_k, v, mask[:, None, None, :]

    def extend(
        self,
        prepared: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        phi_k, v, m = prepared
        new_phi_k, new_v, new_m = self.prepare(keys, values, mask)
        return torch.cat([phi_k, new_phi_k], 2), torch.cat([v, new_v], 2), torch.cat([m, new_m], -1)

    def attend(
        self,
        query: torch.Tensor,
        prepared: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        phi_k, values, mask = prepared
        phi_q = feature_map(self._split(self.W_q(query)))
        causal = positions is not None and positions.causal
        weights = None
        if need_weights or (positions is not None and positions.causal and not positions.aligned()):
            weights = kernel_weights(phi_q, phi_k, visible(mask, positions))
            heads = weights @ values
        elif causal:
            heads = causal_linear(phi_q, phi_k, values, CHUNK)
        else:
            heads = global_linear(phi_q, phi_k, values)
        return self._merge(heads), weights if need_weights else None

    def reference(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A_ij = φ(q_i)·φ(k_j) / Σ_{j' ∈ V(i)} φ(q_i)·φ(k_j') for j ∈ V(i), 0 elsewhere, per head;
        V(i) = the real keys, at positions ≤ i's when causal. Output [A_1 V_1; ...; A_H V_H] W^O, weights A.
        The explicit Tq×Tk matrix, independent of the fast paths."""
        q = self._split(self.W_q(query))
        k, v = self.key_value_heads(keys, values, mask)
        seen = mask[:, None, None, :]
        if positions is not None and positions.causal:
            seen = seen & (positions.relative(4) <= 0)  # key position j ≤ query position i
        a = (feature_map(q) @ feature_map(k).transpose(-1, -2)).masked_fill(~seen, 0)
        a = a / a.sum(-1, keepdim=True)
        return self._merge(a @ v), a if need_weights else None
