"""Each property of the contract, broken once, the way a researcher would break it: the kit fails the plugin
with a message that names that property and its evidence, every other check passes it, and the plugin
written right passes whole. The kit judges from first principles: nothing below is known to it.

    causal means prefix-invariant                         LogLengthOfTheSequence
    eval is a pure function                               DropoutAlwaysOn (at dropout > 0), a seed at import
    the gradient is the derivative of the forward pass    DetachedNormaliser
    every hyperparameter does something                   TemperedHeads (its dropout)
    decoding state is state                               StatefulRecurrence
    weights are what they claim to be                     HeadAveragedWeights, UndeclaredSigmoid
    a failure names the property and the evidence         all of them; two that the old kit misnamed
"""

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attnx.contrib.linear import LinearAttention, LinearState, summed
from attnx.nn.attention import masked_softmax, visible
from attnx.nn.multihead import MultiHeadAttention
from attnx.registry import get, load_file
from attnx.testing import CHECKS, check_attention
from attnx.testing.base import CAUSAL, DERIVATIVE, DOES_SOMETHING, PURE, STATE, WEIGHTS

# ---------------------------------------------------------------------------------------------
# The plugins, each with one flaw


class LogLengthOfTheSequence(MultiHeadAttention):
    """Log-length scaled attention (Chiang & Cholak 2022, "Overcoming a Theoretical Limitation of
    Self-Attention"): the logits times log n, so that attention stays sharp on long inputs. n counts the
    sequence's real keys, where a causal query sees only those up to it: appending tokens changes it."""

    def tokens(self, mask: torch.Tensor, positions) -> torch.Tensor:
        return mask.sum(-1, keepdim=True)  # the flaw: every real key, not those the query sees

    def attend(self, query, prepared, need_weights=True, positions=None):
        _, keys, values, mask = prepared
        q = self._split(self.W_q(query))
        n = self.tokens(mask, positions).to(q.dtype)
        weights = masked_softmax(self.score.at(q, keys, positions) * n.log1p(), visible(mask, positions))
        return self._merge(self.dropout(weights) @ values), weights if need_weights else None


class LogLengthSeen(LogLengthOfTheSequence):
    """The same, right: n counts the keys each query sees."""

    def tokens(self, mask, positions):
        return visible(mask, positions).sum(-1, keepdim=True)


class DropoutAlwaysOn(MultiHeadAttention):
    """Multi-head attention with its dropout written functionally, F.dropout(w, p), whose `training`
    defaults to True: at dropout > 0 eval mode drops weights too, and draws from the process's generator."""

    def attend(self, query, prepared, need_weights=True, positions=None):
        _, keys, values, mask = prepared
        q = self._split(self.W_q(query))
        weights = masked_softmax(self.score.at(q, keys, positions), visible(mask, positions))
        return self._merge(F.dropout(weights, self.dropout.p) @ values), weights if need_weights else None


class DetachedNormaliser(LinearAttention):
    """Linear attention whose normaliser φ(q)ᵀz is detached, to spare the backward pass a division: the
    values are right, the gradient is not their derivative."""

    def normalised(self, numerator, denominator):
        return super().normalised(numerator, denominator.detach())


class TemperedHeads(MultiHeadAttention):
    """A learned temperature per head, τ_h (shape [H]), on multi-head attention; `attend` rewritten for it
    forgets the dropout that `multi_head`'s config still offers."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log_tau = nn.Parameter(torch.zeros(self.num_heads))

    def attend(self, query, prepared, need_weights=True, positions=None):
        _, keys, values, mask = prepared
        q = self._split(self.W_q(query)) / self.log_tau.exp()[:, None, None]
        weights = masked_softmax(self.score.at(q, keys, positions), visible(mask, positions))
        return self._merge(weights @ values), weights if need_weights else None


class StatefulRecurrence(LinearAttention):
    """Linear attention decoding as a stateful RNN layer does (Keras' stateful=True): the running state
    S' lives on the module, started from `prepare`'s keys at the first step; the cache it returns is a
    copy for the record. Beam search reorders the copy, not the state."""

    def extend(self, prepared, keys, values, mask):
        phi_k, v, _ = self.prepare(keys, values, mask)
        if not isinstance(prepared, LinearState):
            self.running = summed(*prepared[:2])
        self.running = self.running + summed(phi_k, v)
        return LinearState(self.running)


class HeadAveragedWeights(MultiHeadAttention):
    """Returns one map per call, the heads' weights averaged (as torch's nn.MultiheadAttention does by
    default), while the context uses each head's own."""

    def attend(self, query, prepared, need_weights=True, positions=None):
        _, keys, values, mask = prepared
        q = self._split(self.W_q(query))
        weights = masked_softmax(self.score.at(q, keys, positions), visible(mask, positions))
        context = self._merge(self.dropout(weights) @ values)
        return context, weights.mean(1) if need_weights else None


class UndeclaredSigmoid(MultiHeadAttention):
    """Sigmoid attention (Ramapuram et al. 2024), σ(s − log n), right in every way but one: it does not
    declare that its weights are not a distribution."""

    def attend(self, query, prepared, need_weights=True, positions=None):
        _, keys, values, mask = prepared
        q = self._split(self.W_q(query))
        seen = visible(mask, positions)
        n = seen.sum(-1, keepdim=True).to(q.dtype)
        weights = torch.sigmoid((self.score.at(q, keys, positions) - n.log()).masked_fill(~seen, -math.inf))
        return self._merge(self.dropout(weights) @ values), weights if need_weights else None


SEEDED_AT_IMPORT = '''
import torch
from attnx import MultiHeadAttention, register_attention

torch.manual_seed(0)  # "reproducible initialisation"


@register_attention("seeded_at_import")
class SeededAtImport(MultiHeadAttention):
    """Multi-head attention, unchanged: only its module seeds the generator."""
'''

# ---------------------------------------------------------------------------------------------
# Each caught by its property alone


# (plugin, its hyperparameters, the check, the property, the evidence its message gives, a correct twin)
FLAWED = [
    (
        LogLengthOfTheSequence,
        {},
        "causality",
        CAUSAL,
        r"the outputs at positions < \d+ change when the sequence ends at position \d+ instead of going on "
        r"to "
        r"\d+ \(max diff [0-9.e-]+\): they depend on what follows them",
        LogLengthSeen,
    ),
    (
        DropoutAlwaysOn,
        {"dropout": 0.1},
        "purity",
        PURE,
        r"the call changed the process: torch's random generator \(it drew numbers or was seeded\)",
        MultiHeadAttention,
    ),
    (
        DetachedNormaliser,
        {},
        "gradients",
        DERIVATIVE,
        r"along a random direction of every parameter and input, autograd's derivative of a loss of the "
        r"outputs is [0-9.e-]+ and central finite differences give [0-9.e-]+ \(difference [0-9.e-]+ of the "
        r"terms' size\)",
        LinearAttention,
    ),
    (
        TemperedHeads,
        {"dropout": 0.1},
        "hyperparameters",
        DOES_SOMETHING,
        r"dropout=0\.55 computes exactly what dropout=0\.1 computes",
        None,
    ),
    (
        StatefulRecurrence,
        {},
        "state",
        STATE,
        r"decoding the batch again on the same site and reordering it gives another output than the first "
        r"pass gave those rows \(max diff [0-9.e-]+\): StatefulRecurrence keeps decoding state outside the "
        r"cache it returns",
        LinearAttention,
    ),
    (
        HeadAveragedWeights,
        {},
        "weights_used",
        WEIGHTS,
        r"the returned weights are not the coefficients of the values in the context: .*\(residual [0-9.e-]+",
        MultiHeadAttention,
    ),
    (
        UndeclaredSigmoid,
        {},
        "weights",
        WEIGHTS,
        r"weights do not sum to 1 over the keys each query sees \(row sums from [0-9.e-]+ to [0-9.e-]+, "
        r"[0-9.e-]+ from 1 at most\), "
        r"and the mechanism declares them a distribution .* declares weights_are = 'nonnegative'",
        None,
    ),
]


@pytest.mark.slow  # the kit over every flaw in the catalogue: each alone is fast
@pytest.mark.parametrize(
    "cls, values, check, prop, evidence, right", FLAWED, ids=[row[0].__name__ for row in FLAWED]
)
def test_each_flaw_fails_its_property_alone_with_a_message_naming_it(
    cls, values, check, prop, evidence, right
) -> None:
    named = rf"^{check} \({prop}\): attention {cls.__name__} \(.*\): {evidence}"
    with pytest.raises(AssertionError, match=named):
        check_attention(cls, **values)  # the kit stops at it: every check before it passed
    if cls is not DropoutAlwaysOn:  # a random output fails every comparison: `purity` runs first to say why
        others = [name for name in CHECKS if name != check and name != "reference"]
        assert check_attention(cls, checks=others, **values) == others
    if right is not None:
        assert check_attention(right, checks=[check], **values) == [check]


def test_a_flaw_that_bites_at_a_configured_value_passes_at_the_defaults() -> None:
    """At dropout = 0, F.dropout(w, 0) is the identity and draws nothing. The kit at the values a run
    configures (`check_site`, `attnx plugins check NAME attention.dropout=0.1`) is what catches it. A
    dropout left out is caught at the default too: the kit tries another value."""
    assert check_attention(DropoutAlwaysOn, checks=["purity"]) == ["purity"]
    with pytest.raises(
        AssertionError, match=r"^hyperparameters .*: dropout=0\.5 computes exactly what dropout=0\.0"
    ):
        check_attention(TemperedHeads, checks=["hyperparameters"])


def test_a_plugin_that_seeds_the_generator_at_import_fails_purity(
    tmp_path: Path, isolated_registries: None
) -> None:
    (tmp_path / "seeded.py").write_text(SEEDED_AT_IMPORT)
    torch.rand(1)  # numbers drawn since the test's own seed: the plugin's seed 0 moves the generator back
    load_file(tmp_path / "seeded.py")
    cls = get("attention", "seeded_at_import")
    with pytest.raises(
        AssertionError,
        match=rf"^purity \({PURE}\): attention SeededAtImport: importing {cls.__module__} changed the "
        r"process: torch's random generator \(it drew numbers or was seeded\)",
    ):
        check_attention(cls, checks=["purity"])


def test_a_mechanism_that_keeps_its_last_weights_for_plotting_fails_purity() -> None:
    """A map kept on the module for a heatmap: every call changes the module (and holds a graph alive)."""

    class KeepsItsMap(MultiHeadAttention):
        def attend(self, query, prepared, need_weights=True, positions=None):
            context, weights = super().attend(query, prepared, True, positions)
            self._last_map = weights
            return context, weights if need_weights else None

    with pytest.raises(
        AssertionError, match=r"^purity .*: the call changed the module: attribute '_last_map' appeared"
    ):
        check_attention(KeepsItsMap)


# ---------------------------------------------------------------------------------------------
# A failure names the property, not another check's wording


def test_eval_mode_dropout_is_named_a_pure_function_broken_not_padding_leaking() -> None:
    """The old kit compared two calls first in `masking`, and blamed the padding for the random draws."""
    with pytest.raises(AssertionError) as failure:
        check_attention(DropoutAlwaysOn, dropout=0.1)
    assert str(failure.value).startswith(f"purity ({PURE}): ") and "padding" not in str(failure.value)


def test_randomness_outside_nn_dropout_in_train_mode_is_named_for_what_it_is() -> None:
    """Gumbel noise on the logits in training (Gumbel-softmax attention): not a flaw, but nothing the kit can
    compare in train mode; it says so, where comparing calls would have blamed the batch or the padding."""

    class GumbelNoised(MultiHeadAttention):
        def attend(self, query, prepared, need_weights=True, positions=None):
            _, keys, values, mask = prepared
            scores = self.score.at(self._split(self.W_q(query)), keys, positions)
            if self.training:
                scores = scores - torch.empty_like(scores).exponential_().log()
            weights = masked_softmax(scores, visible(mask, positions))
            return self._merge(weights @ values), weights if need_weights else None

    with pytest.raises(
        AssertionError,
        match=rf"^purity \({PURE}\): .*train mode, float64\): in train mode with every nn.Dropout at p = 0, "
        r"two calls on the same inputs differ \(max diff [0-9.e-]+\): the output depends on the random "
        r"generators",
    ):
        check_attention(GumbelNoised)
