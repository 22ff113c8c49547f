"""The kit's settings catch what short, fresh, eval-mode float64 checks let through.

Every check runs in three settings (`attnx.testing.cases.SETTINGS`): short sequences with initial
parameters in eval mode (the old kit's only one), short ones with perturbed parameters in train mode, and
long ones (past a block of 64) with perturbed parameters. The plugins below are plausible and carry one
subtle flaw each; each is caught by the check meant for it, with a message naming the setting, and where
the flaw hides in the first setting, the kit restricted to that setting passes it, so the new settings are
what catch it. Unusual but correct plugins (a streaming softmax, a learnt relative-position table, a
context that is a function of the weighted sum) pass every check that applies.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from test_kit import Sound
from torch import nn

import attnx.testing
import attnx.testing.run
from attnx.contrib.linear import LinearAttention, feature_map, normalised, with_ones
from attnx.contrib.sliding_window import SlidingWindowAttention
from attnx.nn.attention import Attention, masked_softmax, visible
from attnx.nn.multihead import MultiHeadAttention
from attnx.nn.scores import DotScore
from attnx.testing import CHECKS, check_attention, check_score, fidelity
from attnx.testing.cases import SETTINGS

# ---------------------------------------------------------------------------------------------
# Broken plugins: one flaw each, invisible to the old kit (its one setting, its checks)


def carry_skipping_a_chunk(phi_q, phi_k, v, chunk):
    """Linear attention's causal prefix sum in chunks, whose carry shifts the inclusive prefix by two chunks
    instead of one: chunk c sees chunks 0..c-2 and its own, never the one just before it."""
    n, pad = phi_q.size(-2), -phi_q.size(-2) % chunk
    v = with_ones(v)
    if pad:
        phi_q, phi_k, v = (F.pad(x, (0, 0, 0, pad)) for x in (phi_q, phi_k, v))
    phi_q, phi_k, v = (x.unflatten(-2, (-1, chunk)) for x in (phi_q, phi_k, v))
    states = (phi_k.transpose(-1, -2) @ v).cumsum(2)
    carry = F.pad(states, (0, 0, 0, 0, 2, 0))[:, :, : states.size(2)]  # the bug: 2, not 1
    out = phi_q @ carry + (phi_q @ phi_k.transpose(-1, -2)).tril() @ v
    out = out.flatten(2, 3)[:, :, :n]
    return normalised(out[..., :-1], out[..., -1:])


class SkipsAChunk(LinearAttention):
    """Linear attention whose causal fast path (chunks of 16) drops the previous chunk's state."""

    def attend(self, query, prepared, need_weights=True, positions=None):
        if need_weights or positions is None or not positions.causal or not positions.aligned():
            return super().attend(query, prepared, need_weights, positions)
        phi_k, values, _ = prepared
        phi_q = feature_map(self._split(self.W_q(query)))
        return self._merge(carry_skipping_a_chunk(phi_q, phi_k, values, 16)), None


class LearnedAbsoluteBias(Sound):
    """Declares position_free, yet adds a learnt bias per key position (16 of them, the last shared by
    every later one), initialised at zero: invisible until training moves it."""

    def __init__(self, query_dim, key_dim, value_dim, score=None):
        super().__init__(query_dim, key_dim, value_dim, score)
        self.position_bias = nn.Parameter(torch.zeros(16))

    def scores(self, query, keys, mask, positions):
        bias = self.position_bias[positions.key.clamp(max=15)][:, None, :]
        return super().scores(query, keys, mask, positions) + bias


class HeadZeroTemperature(MultiHeadAttention):
    """A learnt temperature per head that broadcasts head 0's to every head ([0], not [:, None, None])."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.temperature = nn.Parameter(torch.ones(self.num_heads))

    def attend(self, query, prepared, need_weights=True, positions=None):
        _, keys, values, mask = prepared
        q = self._split(self.W_q(query)) * self.temperature[0]  # the bug
        weights = masked_softmax(self.score.at(q, keys, positions), visible(mask, positions))
        return self._merge(self.dropout(weights) @ values), weights if need_weights else None


class BatchNormedScores(Sound):
    """Standardises the scores as BatchNorm does: in train mode with the mean and variance of the whole
    batch (every sequence, query and key, padding included); in eval mode with running statistics."""

    def __init__(self, query_dim, key_dim, value_dim, score=None):
        super().__init__(query_dim, key_dim, value_dim, score)
        self.norm = nn.BatchNorm1d(1, affine=False)

    def scores(self, query, keys, mask, positions):
        s = super().scores(query, keys, mask, positions)
        return self.norm(s.reshape(-1, 1)).view_as(s)


class UnshiftedSoftmax(Sound):
    """softmax written as exp(s) / Σ exp(s), without subtracting the largest score first."""

    def attend(self, query, prepared, need_weights=True, positions=None):
        _, keys, values, mask = prepared
        seen = visible(mask.unsqueeze(1), positions)
        e = self.scores(query, keys, mask, positions).masked_fill(~seen, -math.inf).exp()
        weights = e / e.sum(-1, keepdim=True)
        return weights @ values, weights if need_weights else None


class FastPathUnshifted(Sound):
    """Explicit softmax when weights are asked for; the path without them (what training and beam search
    take) divides unshifted exponentials."""

    def attend(self, query, prepared, need_weights=True, positions=None):
        if need_weights:
            return super().attend(query, prepared, need_weights, positions)
        return UnshiftedSoftmax.attend(self, query, prepared, need_weights, positions)


class TopLeftCausalKernel(MultiHeadAttention):
    """Without weights, hands causality to the fused kernel's `is_causal`, which aligns the mask top-left:
    right when queries and keys are the same positions, wrong for a decoding step (query t, keys 0..t)."""

    def attend(self, query, prepared, need_weights=True, positions=None):
        if need_weights or positions is None or not positions.causal:
            return super().attend(query, prepared, need_weights, positions)
        _, keys, values, _ = prepared  # padding follows every real query: the causal mask hides it
        q = self._split(self.W_q(query))
        return self._merge(F.scaled_dot_product_attention(q, keys, values, is_causal=True)), None


class TopTwoContext(Sound):
    """Returns the dense softmax weights, but its context uses the two heaviest keys, renormalised."""

    def context(self, weights, values, mask):
        top = weights.topk(min(2, weights.size(-1)), dim=-1)
        sparse = torch.zeros_like(weights).scatter(-1, top.indices, top.values)
        return sparse / sparse.sum(-1, keepdim=True) @ values


class KeyCentredScores(Sound):
    """Cross-attention that removes each key's prior salience: its score minus its mean over the queries
    of the call. A step of one query sees other logits than the same query among the whole target."""

    self_attention = causal = incremental = False

    def scores(self, query, keys, mask, positions):
        s = super().scores(query, keys, mask, positions)
        return s - s.mean(-2, keepdim=True)


# of my own


class FirstBlockShift(Sound):
    """Softmax in one pass over blocks of 16 keys, every block shifted by the first block's largest score
    (so the running sums never need rescaling): exact while the first 16 keys hold the maximum, while exp
    overflows in float32 once a later key outscores them by ~89."""

    BLOCK = 16

    def attend(self, query, prepared, need_weights=True, positions=None):
        _, keys, values, mask = prepared
        seen = visible(mask.unsqueeze(1), positions)
        scores = self.scores(query, keys, mask, positions).masked_fill(~seen, -math.inf)
        shift = scores[..., : self.BLOCK].amax(-1, keepdim=True)
        shift = torch.where(torch.isfinite(shift), shift, 0)  # no key in the first block: nothing to shift
        blocks = [
            (scores[..., s : s + self.BLOCK] - shift).exp() for s in range(0, scores.size(-1), self.BLOCK)
        ]
        weights = torch.cat(blocks, -1)
        weights = weights / sum(block.sum(-1, keepdim=True) for block in blocks)
        return weights @ values, weights if need_weights else None


class EvictsOneTooMany(SlidingWindowAttention):
    """A decoding cache that forgets keys outside the window, keeping window − 1 of them instead of
    window (the newest key counted twice): query t sees t − w + 2..t, one key short."""

    def extend(self, prepared, keys, values, mask):
        window = super().extend(prepared, keys, values, mask)
        kept = torch.arange(window.mask.size(-1)) >= window.mask.size(-1) - (self.window - 1)
        return window._replace(mask=window.mask & kept)


class WideReference(SlidingWindowAttention):
    """A correct sliding window whose `reference` takes |j − i| ≤ w for the window (< w is right)."""

    def reference(self, query, keys, values, mask, need_weights=True, positions=None):
        q = self._split(self.W_q(query))
        pad = ~mask.unsqueeze(-1)
        k = self._split(self.W_k(keys.masked_fill(pad, 0)))
        v = self._split(self.W_v(values.masked_fill(pad, 0)))
        offset = positions.relative(4)
        seen = (offset.abs() <= self.window) & (mask[:, None, None, :] | (offset == 0))  # the bug: <=
        if positions.causal:
            seen = seen & (offset <= 0)
        weights = masked_softmax(self.score.at(q, self.score.prepare(k), positions), seen)
        return self._merge(weights @ v), weights if need_weights else None


# ---------------------------------------------------------------------------------------------
# Correct, unusual plugins


class StreamingSoftmax(Sound):
    """Without weights, softmax attention streamed over blocks of 16 keys (online softmax: a running
    maximum, a running sum and an accumulator rescaled whenever the maximum grows); with weights, the
    explicit softmax. `reference` is the plain formula."""

    BLOCK = 16

    def attend(self, query, prepared, need_weights=True, positions=None):
        if need_weights:
            return super().attend(query, prepared, need_weights, positions)
        _, keys, values, mask = prepared
        seen = visible(mask.unsqueeze(1), positions).expand(-1, query.size(1), -1)
        scores = self.scores(query, keys, mask, positions).masked_fill(~seen, -math.inf)
        top = scores.new_full((*scores.shape[:-1], 1), -math.inf)
        total = torch.zeros_like(top)
        acc = scores.new_zeros(*scores.shape[:-1], values.size(-1))
        for start in range(0, scores.size(-1), self.BLOCK):
            block = scores[..., start : start + self.BLOCK]
            new_top = torch.maximum(top, block.amax(-1, keepdim=True))
            shift = torch.where(torch.isfinite(new_top), new_top, 0)  # no key seen yet: nothing to shift
            rescale, e = (top - shift).exp(), (block - shift).exp()
            total = total * rescale + e.sum(-1, keepdim=True)
            acc = acc * rescale + e @ values[..., start : start + self.BLOCK, :]
            top = new_top
        return acc / total, None

    def reference(self, query, keys, values, mask, need_weights=True, positions=None):
        scores = self.score.at(query, self.score.prepare(keys), positions)
        weights = masked_softmax(scores, visible(mask.unsqueeze(1), positions))
        return weights @ values.masked_fill(~mask.unsqueeze(-1), 0), weights


class RelativeTable(DotScore):
    """Shaw et al. 2018's relative positions as a logit bias: qᵀk/√d + b_h(clip(j − i, −8, 8)), a learnt
    table per head, initialised at zero."""

    uses_positions = True
    CLIP = 8

    def __init__(self, query_dim, key_dim, num_heads=1):
        super().__init__(query_dim, key_dim)
        self.table = nn.Parameter(torch.zeros(num_heads, 2 * self.CLIP + 1))

    def forward(self, query, keys, positions):
        distance = positions.relative(query.dim()).clamp(-self.CLIP, self.CLIP) + self.CLIP
        bias = self.table[:, distance]  # [H, B|1, (1,) Tq, Tk]
        bias = bias.movedim(0, -3).squeeze(-4) if query.dim() == 4 else bias.squeeze(0)
        return super().forward(query, keys) / math.sqrt(self.key_dim) + bias.to(query.dtype)


class AttentionalState(Sound):
    """Luong et al. 2015's attentional state as the context: tanh(W_c [Σ_j w_ij v_j; q_i]), a function of
    the weighted sum (and of the query), not the sum itself."""

    def __init__(self, query_dim, key_dim, value_dim, score=None):
        super().__init__(query_dim, key_dim, value_dim, score)
        self.W_c = nn.Linear(value_dim + query_dim, value_dim)

    def attend(self, query, prepared, need_weights=True, positions=None):
        ctx, weights = super().attend(query, prepared, True, positions)
        return torch.tanh(self.W_c(torch.cat([ctx, query], -1))), weights if need_weights else None


class GatedContext(Sound):
    """σ(W_g q_i) ⊙ Σ_j w_ij v_j: a gate from the query on the weighted sum of the values."""

    def __init__(self, query_dim, key_dim, value_dim, score=None):
        super().__init__(query_dim, key_dim, value_dim, score)
        self.W_g = nn.Linear(query_dim, value_dim)

    def attend(self, query, prepared, need_weights=True, positions=None):
        ctx, weights = super().attend(query, prepared, True, positions)
        return torch.sigmoid(self.W_g(query)) * ctx, weights if need_weights else None


class ReZeroGate(Sound):
    """α Σ_j w_ij v_j with α initialised at zero (ReZero, Bachlechner et al. 2021): at step 0 the context
    is 0, no gradient reaches the scores, and the weights explain nothing; trained, all of it moves."""

    def __init__(self, query_dim, key_dim, value_dim, score=None):
        super().__init__(query_dim, key_dim, value_dim, score)
        self.alpha = nn.Parameter(torch.zeros(()))

    def attend(self, query, prepared, need_weights=True, positions=None):
        ctx, weights = super().attend(query, prepared, True, positions)
        return self.alpha * ctx, weights if need_weights else None


# ---------------------------------------------------------------------------------------------
# Tests


def applicable(cls):
    """The checks the capability flags of `cls` make applicable, in order (with its default score)."""
    skip = set()
    if cls.reference is Attention.reference:  # none overridden
        skip.add("reference")
    if not (cls.causal and cls.self_attention):
        skip |= {"causality", "cached_decoding", "state"}
    if not cls.position_free:
        skip.add("permutation")
    if not cls.cross_attention:
        skip |= {"queries", "compiled"}
    return [name for name in CHECKS if name not in skip]


@pytest.fixture
def old_setting(monkeypatch):
    """The kit restricted to the old kit's one setting: short, initial parameters, eval mode."""
    assert (str(SETTINGS[0]), SETTINGS[0].lengths) == ("initial parameters, eval mode", (5, 3, 1))
    monkeypatch.setattr(attnx.testing.run, "SETTINGS", SETTINGS[:1])
    monkeypatch.setattr(attnx.testing.cases, "SETTINGS", SETTINGS[:1])


LONG = r"perturbed parameters, eval mode"
TRAIN = r"perturbed parameters, train mode"
FIRST = r"initial parameters, eval mode"

# (plugin, the check that catches it, where: the call and setting in its message, what it says, other checks
# that fail too, whether the old kit's setting alone lets it through)
CAUGHT = [
    (
        SkipsAChunk,
        "fast_path",
        rf"\(self-attention, causal, T=67; {LONG}\)",
        "need_weights=False changes the context",
        ("reference",),
        True,
    ),
    (
        LearnedAbsoluteBias,
        "permutation",
        rf"\(self-attention, T=5; {TRAIN}\)",
        "permuting the sequence does not permute the outputs",
        (),
        True,
    ),
    (
        HeadZeroTemperature,
        "parameters",
        rf"\({TRAIN}\)",
        r"parameter 'temperature' \(4,\) is per head, and heads 1, 2, 3 of 4 receive no gradient",
        (),
        True,
    ),
    (
        BatchNormedScores,
        "masking",
        rf"\(cross-attention, Tq=1, Tk=5; {TRAIN}\)",
        "the output changes when padded keys/values change",
        ("batch", "queries", "padding", "finiteness", "causality"),
        True,
    ),
    (
        UnshiftedSoftmax,
        "precision",
        rf"\(cross-attention, Tq=3, Tk=67; {LONG}, float32, need_weights=True, inputs of scale 30\)",
        "NaN/inf in the outputs",
        (),
        True,
    ),
    (
        FastPathUnshifted,
        "precision",
        rf"\(cross-attention, Tq=3, Tk=67; {LONG}, float32, need_weights=False, inputs of scale 30\)",
        "NaN/inf in the outputs",
        (),
        True,
    ),
    (
        TopLeftCausalKernel,
        "cached_decoding",
        rf"\(causal self-attention, step t=1; {FIRST}, float64, need_weights=False\)",
        r"the cached step differs from a full causal pass over positions 0\.\.1",
        (),
        False,
    ),
    (
        TopTwoContext,
        "weights_used",
        rf"\(cross-attention, Tq=3, Tk=67; {LONG}\)",
        "the returned weights are not the coefficients of the values in the context",
        (),
        True,
    ),
    (
        KeyCentredScores,
        "queries",
        rf"\(cross-attention, Tq=3, Tk=5; {FIRST}, float64, need_weights=True\)",
        "query 0 alone gets another output than among 3 queries",
        (),
        False,
    ),
    (
        FirstBlockShift,
        "precision",
        rf"\(cross-attention, Tq=3, Tk=67; {LONG}, float32, need_weights=True, inputs of scale 30\)",
        "NaN/inf in the outputs",
        (),
        True,
    ),
    (
        EvictsOneTooMany,
        "cached_decoding",
        rf"\(causal self-attention, step t=16; {LONG}, float64, need_weights=True\)",
        r"the cached step differs from a full causal pass over positions 0\.\.16",
        (),
        True,
    ),
    (
        WideReference,
        "reference",
        rf"\(self-attention, T=33; {LONG}, float64, need_weights=True, lengths \(33,\)\)",
        "forward differs from the plugin's reference",
        (),
        True,
    ),
]


@pytest.mark.slow  # the kit over every flaw in the catalogue: each alone is fast
@pytest.mark.parametrize(
    "cls, check, where, message, also, hidden", CAUGHT, ids=[row[0].__name__ for row in CAUGHT]
)
def test_each_flaw_is_caught_by_its_check_in_its_setting(cls, check, where, message, also, hidden) -> None:
    with pytest.raises(
        AssertionError, match=rf"^{check} \([^)]*\): attention {cls.__name__} {where}: {message}"
    ):
        check_attention(cls)  # every check before this one passed
    with pytest.raises(
        AssertionError, match=rf"^{check} \([^)]*\): attention {cls.__name__} {where}: {message}"
    ):
        check_attention(cls, checks=(check,))
    for other in also:
        with pytest.raises(AssertionError, match=rf"^{other} \([^)]*\): "):
            check_attention(cls, checks=(other,))
    others = [name for name in applicable(cls) if name not in (check, *also)]
    assert check_attention(cls, checks=others) == others


@pytest.mark.parametrize("cls", [row[0] for row in CAUGHT if row[5]], ids=lambda cls: cls.__name__)
def test_the_old_setting_alone_lets_the_flaw_through(cls, old_setting) -> None:
    """Short sequences, initial parameters, eval mode: every check that runs there passes, so the new
    settings catch it."""
    assert check_attention(cls) == [name for name in applicable(cls) if CHECKS[name].settings(SETTINGS[0])]


def test_a_whole_parameter_gets_a_gradient_where_three_heads_of_it_get_none() -> None:
    """What the old, per-parameter gradient check saw of `HeadZeroTemperature`: a non-zero gradient."""
    att = HeadZeroTemperature(8, 8, 8).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    attnx.testing.projection_loss(att(x, x, x, torch.ones(2, 5, dtype=torch.bool))[0]).backward()
    assert att.temperature.grad[0] != 0
    assert (att.temperature.grad[1:] == 0).all()


def test_unshifted_exp_survives_inputs_of_scale_one(monkeypatch) -> None:
    """At the old inputs' scale exp(s) does not overflow: only inputs of scale 30 catch it."""
    monkeypatch.setattr(fidelity, "LARGE", 1.0)
    assert check_attention(UnshiftedSoftmax, checks=("precision",)) == ["precision"]


# the correct plugins


def test_a_streaming_softmax_passes_every_check() -> None:
    assert max(SETTINGS[-1].lengths) > StreamingSoftmax.BLOCK  # the long setting streams several blocks
    assert check_attention(StreamingSoftmax) == list(CHECKS)


def test_a_learnt_relative_position_table_passes_every_check() -> None:
    # compiled: a score that uses positions never serves an rnn decoder, whose call it checks
    expected = [name for name in CHECKS if name not in ("permutation", "reference", "compiled")]
    assert check_score(RelativeTable) == expected  # every element of the table gets a gradient
    assert check_attention(MultiHeadAttention, RelativeTable) == expected  # a table per head


@pytest.mark.parametrize("cls", [AttentionalState, GatedContext, ReZeroGate], ids=lambda cls: cls.__name__)
def test_a_context_that_is_a_function_of_the_weighted_sum_passes_every_check(cls) -> None:
    """weights_used absorbs what is applied per query after Σ_j w_ij v_j: a tanh layer, a gate; gradients
    and weights_used judge parameters moved from their initialisation, where a zero gate has opened."""
    assert check_attention(cls) == [name for name in CHECKS if name != "reference"]
