"""BaseConv (Arora et al. 2023, "Zoology: Measuring and Improving Recall in Efficient Language Models",
`zoology/mixers/base_conv.py`): a gated convolution, the mixer Zoology builds its convolutional baselines
(H3, Hyena) down to. Per channel c of the width D, with the token's own input u_i as the query and the
sequence as the values,

    y_i = σ(W u_i + b) ⊙ σ(c_i) + u_i,    c_i = Σ_{0 ≤ d < L} h_d ⊙ v_{i−d} + s_i    (v_{<0} = 0)

with σ the identity, or SiLU when `use_act` (Zoology's switch), and one of two filters h ∈ R^{D×L}:

    short  (kernel_size = k ≥ 1):  L = k taps, nn.Conv1d's, and s_i its bias β (Zoology's ShortConvolution)
    long   (kernel_size = null):   L = l_max taps and s_i = v_i (Zoology's fft_conv adds its input), the
                                   taps implicit, h_d = MLP(z_d) over the features z_d = [d / (l_max − 1),
                                   cos ω d, −sin ω d], ω = 2π·10⁻⁴ / l_max, MLP 3 → 16 → D with a ReLU
                                   (`ImplicitLongConvolution`, its defaults), or a free D × l_max parameter
                                   when `implicit_long_conv` is false (`LongConvolution`).

Distances count tokens: query i reads the keys at positions up to its own, the latest at d = 0. There is
no softmax: the context is D Toeplitz maps, one per channel, applied to the values, so `need_weights`
returns them as D "heads", [B, D, Tq, Tk] with A_cij = h_{c,d} (+1 at d = 0 for the long filter), signed;
the gate and the skip act per query after them. The filter is causal at every site: a bidirectional one
(an encoder) gets the same left-to-right map, as Zoology defines no other.

Self-attention over N tokens runs as one FFT convolution, O(N log N); decoding keeps the last L inputs,
k·D numbers for the short filter (constant) and min(n, l_max)·D for the long one (Zoology's state_size:
it grows with the sequence up to the filter's length).

Defaults as Zoology's BaseConv, except `kernel_size`: null (Zoology's −1: a size is never negative in
attnx), the long filter, since attnx's `lm.conv` already
puts the short convolution before every mechanism; l_max 1024 is its MQAR configs' (the longest test
sequence, `experiments/mqar_example_configs/original_mqar_configs.py`), use_act false. A short filter
refuses an l_max or implicit_long_conv other than the defaults, which Zoology ignores there: a value that
would change nothing is a mistake to name, not to run.

    attnx train task=mqar attention=base_conv lm.conv=3
"""

import math
from typing import NamedTuple, cast

import torch
import torch.nn.functional as F
from torch import nn

from attnx import Attention, Positions, ScoreFactory, register_attention

FREQUENCY = 1e-4  # Zoology's one band of positional features: linspace(1e-4, bands - 1, bands), bands = 1
HIDDEN = 16  # ImplicitLongConvolution's d_hidden
L_MAX = 1024  # Zoology's MQAR l_max: its longest test sequence


class Inputs(NamedTuple):
    """`prepare`'s cache: the values [B, T, D] (0 at padding) from the sequence's start, their mask [B, T]."""

    values: torch.Tensor
    mask: torch.Tensor


class Recent(NamedTuple):
    """A decoding cache: the last (at most) L values and their mask, oldest first, for a query after them."""

    values: torch.Tensor
    mask: torch.Tensor


def positional_features(taps: int, l_max: int, like: torch.Tensor) -> torch.Tensor:
    """z_d for d < taps, [taps, 3]: Zoology's PositionalEmbedding(3, l_max) at its first `taps` rows."""
    d = torch.arange(taps, dtype=like.dtype, device=like.device)
    angle = 2 * math.pi * FREQUENCY * d / l_max
    return torch.stack([d / max(l_max - 1, 1), angle.cos(), -angle.sin()], -1)


def weighed(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Σ_j A_cij v_jc: weights [B, D, Tq, Tk] applied channel by channel to values [B, Tk, D], [B, Tq, D]."""
    return (weights @ values.transpose(1, 2)[..., None]).squeeze(-1).transpose(1, 2)


@register_attention("base_conv")
class BaseConv(Attention):
    """Zoology's BaseConv as a causal self-attention mechanism; see the module's docstring. The query is the
    gated token and the values are convolved (in self-attention both are the block's normed input); the
    keys are not read: a convolution weighs a token by its distance alone."""

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
        kernel_size: int | None = None,
        l_max: int = L_MAX,
        implicit_long_conv: bool = True,
        use_act: bool = False,
    ) -> None:
        if kernel_size is not None and kernel_size < 1:
            raise ValueError(
                f"base_conv needs kernel_size >= 1 (a short filter) or null (the long one), got "
                f"kernel_size={kernel_size}"
            )
        if l_max < 1:
            raise ValueError(f"base_conv needs l_max >= 1, got l_max={l_max}")
        if kernel_size is not None and (l_max != L_MAX or not implicit_long_conv):
            # they would change nothing: a short filter has k taps of its own
            raise ValueError(
                f"base_conv's l_max and implicit_long_conv shape the long filter (kernel_size=null), not a "
                f"short one: got kernel_size={kernel_size} with l_max={l_max}, "
                f"implicit_long_conv={implicit_long_conv}"
            )
        if query_dim != value_dim:
            raise ValueError(
                f"base_conv gates and adds the query to the convolved values: it needs query_dim == "
                f"value_dim, got query_dim={query_dim}, value_dim={value_dim}"
            )
        super().__init__(query_dim, key_dim, value_dim, score)
        self.kernel_size, self.l_max, self.use_act = kernel_size, l_max, use_act
        self.implicit_long_conv = implicit_long_conv
        self.length = l_max if kernel_size is None else kernel_size  # L
        dim = value_dim
        self.projection = nn.Linear(dim, dim)
        if kernel_size is not None:
            self.conv = nn.Conv1d(dim, dim, kernel_size, groups=dim)
        elif implicit_long_conv:
            self.mlp = nn.Sequential(nn.Linear(3, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, dim))
        else:
            self.filter = nn.Parameter(torch.randn(dim, l_max))

    def taps(self, n: int) -> torch.Tensor:
        """h_0 .. h_{m−1}, m = min(n, L), [D, m]: the taps reaching n tokens (long: skip in h_0)."""
        m = min(n, self.length)
        if self.kernel_size is not None:
            return self.conv.weight[:, 0].flip(-1)[:, :m]  # conv1d correlates: its last tap is d = 0
        if self.implicit_long_conv:
            h = self.mlp(positional_features(m, self.l_max, self.projection.weight)).T
        else:
            h = self.filter[:, :m]
        return torch.cat([h[:, :1] + 1, h[:, 1:]], 1)

    def shift(self) -> torch.Tensor | float:
        """s_i less the long filter's skip (which `taps` holds): the short filter's bias β, or 0."""
        return 0.0 if self.kernel_size is None else cast(torch.Tensor, self.conv.bias)

    def state_size(self, n: int) -> int:
        """The last min(n, L) values: k·D for the short filter, up to l_max·D for the long one."""
        return min(n, self.length) * self.value_dim

    def prepare(self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> Inputs:
        # replaced, not multiplied: padding may hold NaN, and an FFT spreads one NaN over every output
        return Inputs(values.masked_fill(~mask[..., None], 0), mask)

    def extend(
        self, prepared: Inputs | Recent, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
    ) -> Recent:
        joined = [torch.cat([old, x], 1) for old, x in zip(prepared, self.prepare(keys, values, mask))]
        # a slice of a concatenation keeps all of it alive: the clone holds the last L values alone
        return Recent(*(x if x.size(1) <= self.length else x[:, -self.length :].clone() for x in joined))

    def attend(
        self,
        query: torch.Tensor,
        prepared: Inputs | Recent,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if positions is None:
            raise ValueError("base_conv needs positions: query i reads the keys at positions up to its own")
        values, mask = prepared
        if isinstance(prepared, Recent):
            if query.size(1) > 1:
                raise ValueError(
                    f"base_conv's decoding cache answers one query at a time, got {query.size(1)}: it holds "
                    "the last values, not the earlier queries' windows"
                )
            n = values.size(1)
            weights = self.toeplitz(mask[:, None], (n - 1 - torch.arange(n, device=mask.device))[None, None])
            held_all = n < self.length  # else earlier keys may have left the cache: no whole row to return
            return self.gated(query, weighed(weights, values)), weights if need_weights and held_all else None
        if need_weights or not positions.aligned():
            seen = positions.relative() <= 0  # [B|1, Tq, Tk]: the keys at positions up to the query's
            distance = seen.sum(-1, keepdim=True) - 1 - torch.arange(values.size(1), device=seen.device)
            weights = self.toeplitz(mask[:, None] & seen, distance)
            return self.gated(query, weighed(weights, values)), weights if need_weights else None
        return self.gated(query, self.convolved(values)), None

    def toeplitz(self, seen: torch.Tensor, distance: torch.Tensor) -> torch.Tensor:
        """A_cij = h_{c, distance_ij} where `seen` and 0 ≤ distance < L, else 0: [B, D, Tq, Tk]."""
        h = self.taps(seen.size(-1))
        inside = seen & (distance >= 0) & (distance < h.size(1))
        taps = h[:, distance.clamp(0, h.size(1) - 1)]  # [D, B|1, Tq, Tk]
        return torch.where(inside[:, None], taps.movedim(0, 1), 0)

    def convolved(self, values: torch.Tensor) -> torch.Tensor:
        """Σ_d h_d ⊙ v_{i−d} by index over the whole sequence, [B, T, D]: one FFT product, zero-padded to
        T + m so that the circular convolution wraps nothing into the first T outputs."""
        t = values.size(1)
        h = self.taps(t)
        size = t + h.size(1)
        spectrum = torch.fft.rfft(values.transpose(1, 2), n=size) * torch.fft.rfft(h, n=size)
        return torch.fft.irfft(spectrum, n=size)[..., :t].transpose(1, 2)

    def gated(self, query: torch.Tensor, convolved: torch.Tensor) -> torch.Tensor:
        """σ(W u + b) ⊙ σ(c) + u, from the convolution c [B, Tq, D] (its shift s not yet added)."""
        gate, convolved = self.projection(query), convolved + self.shift()
        if self.use_act:
            gate, convolved = F.silu(gate), F.silu(convolved)
        return gate * convolved + query

    def reference(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """c_i = Σ_{d < min(i + 1, L)} h_d ⊙ v_{i−d} + s_i over the real values, tap by tap on the values
        shifted d tokens, for self-attention (query i is token i); A_cij = h_{c, i−j} for real j with
        0 ≤ i − j < L, as a sum of shifted identities. Shares the taps h with forward (the filter's
        parametrisation) and nothing of its convolution, distances or gate."""
        n = values.size(1)
        v = torch.where(mask[..., None], values, 0)
        h = self.taps(n)
        taps = range(h.size(1))
        c = torch.stack([F.pad(v, (0, 0, d, 0))[:, :n] * h[:, d] for d in taps]).sum(0)
        identities = [torch.diag(torch.ones(n - d, dtype=v.dtype), -d) for d in taps]
        a = torch.stack([h[:, d, None, None] * identities[d] for d in taps]).sum(0) * mask[:, None, None, :]
        g = (self.projection.weight @ query[..., None])[..., 0] + self.projection.bias
        c = c + self.shift()
        if self.use_act:
            g, c = F.silu(g), F.silu(c)
        return g * c + query, a if need_weights else None
