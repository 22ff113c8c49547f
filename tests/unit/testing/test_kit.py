"""The conformance kit catches each way a plugin can break the contract, with a message naming the check.

Broken plugins come in two sets. The first breaks the 2015 contract (shapes, masking, weights) and is
caught by the first check it fails. The second, `Sound` with one bug each, fails exactly one check:
each is caught by its own check, and every other check, run alone, passes it.
"""

import pytest
import torch
from torch import nn

from attnx import Attention, Score
from attnx.nn.attention import masked_softmax, visible
from attnx.nn.classic import NoAttention, ScoredAttention
from attnx.nn.multihead import MultiHeadAttention
from attnx.nn.positions import Positions
from attnx.nn.scores import DotScore
from attnx.registry import load_all, registry
from attnx.testing import (
    CHECKS,
    check_all,
    check_attention,
    check_attention_shapes,
    check_score,
    check_score_shapes,
)
from attnx.testing.suite import pairs

# ---------------------------------------------------------------------------------------------
# Scores


class TransposedScore(DotScore):
    def forward(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        return super().forward(query, prepared).transpose(-1, -2)


class UnusedParameterScore(DotScore):
    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__(query_dim, key_dim)
        self.unused = nn.Linear(query_dim, key_dim)


class QueryStepScore(DotScore):
    """Assumes one query at a time (Tq=1), as a decoder-only author might."""

    def forward(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        return (prepared @ query.squeeze(-2).unsqueeze(-1)).transpose(-1, -2)


class DistanceBias(DotScore):
    """f(q_i, k_j) = qᵀk − |j − i| / 2: a relative-distance bias (as ALiBi's), read from `Positions`."""

    uses_positions = True

    def forward(self, query: torch.Tensor, prepared: torch.Tensor, positions: Positions) -> torch.Tensor:
        return super().forward(query, prepared) - 0.5 * positions.relative(query.dim()).abs()


class ArangeDistanceBias(DistanceBias):
    """Takes i and j from arange, as if every call started at position 0: a decoding step at t is wrong."""

    def forward(self, query: torch.Tensor, prepared: torch.Tensor, positions: Positions) -> torch.Tensor:
        i, j = torch.arange(query.size(-2))[:, None], torch.arange(prepared.size(-2))
        return DotScore.forward(self, query, prepared) - 0.5 * (j - i).abs()


# ---------------------------------------------------------------------------------------------
# Mechanisms that break the 2015 contract (caught by the first check they fail)


class Broken(ScoredAttention):
    """softmax attention with one deliberate bug per subclass; it claims no capability beyond a site."""

    def attend(self, query, prepared, need_weights=True):
        keys, values, mask = prepared
        weights = self.weights(self.score(query, keys), mask.unsqueeze(1))
        return self.context(weights, values, mask), weights

    def weights(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return masked_softmax(scores, mask)

    def context(self, weights: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return weights @ values


class IgnoresMask(Broken):
    def weights(self, scores, mask):
        return scores.softmax(-1)


class RawScoresAsWeights(Broken):
    def weights(self, scores, mask):
        return scores.masked_fill(~mask, 0)


class Unnormalised(Broken):
    def weights(self, scores, mask):
        return scores.exp().masked_fill(~mask, 0)


class StandardisedScores(Broken):
    """Standardises scores over the valid keys with the unbiased std: 0/0 with one key."""

    def weights(self, scores, mask):
        n = mask.sum(-1, keepdim=True)
        mean = scores.masked_fill(~mask, 0).sum(-1, keepdim=True) / n
        var = (scores - mean).pow(2).masked_fill(~mask, 0).sum(-1, keepdim=True) / (n - 1)
        return masked_softmax((scores - mean) / var.sqrt(), mask)


class BatchCentred(Broken):
    """Subtracts the batch mean: in self-attention the padded queries' outputs enter every real one."""

    def context(self, weights, values, mask):
        ctx = weights @ values
        return ctx - ctx.mean(0)


class LeaksPaddedValues(Attention):
    """Mean pooling that forgets the mask."""

    default_score = None

    def prepare(self, keys, values, mask):
        return values.mean(1, keepdim=True)

    def attend(self, query, prepared, need_weights=True):
        return prepared.expand(-1, query.size(1), -1), None


class FastPathDiffers(Broken):
    def attend(self, query, prepared, need_weights=True):
        ctx, weights = super().attend(query, prepared)
        return (ctx, weights) if need_weights else (2 * ctx, None)


# ---------------------------------------------------------------------------------------------
# Mechanisms that break exactly one invariant


class Sound(Attention):
    """Softmax attention with every capability, incremental: the base each plugin below breaks once,
    through one of the hooks `hide`, `append`, `scores`, `sharpen`, `context`."""

    default_score = "dot"
    takes_positions = causal = position_free = incremental = True

    def __init__(self, query_dim: int, key_dim: int, value_dim: int, score=None) -> None:
        super().__init__(query_dim, key_dim, value_dim, score)
        self.score = self.make_score(score, query_dim, key_dim)

    def prepare(self, keys, values, mask):
        return keys, self.score.prepare(keys), self.hide(values, mask), mask

    def state_size(self, n):
        return n * (self.key_dim + self.value_dim)  # its keys and values (the score's prepare: the keys)

    def extend(self, prepared, keys, values, mask):
        old_keys, _, old_values, old_mask = prepared
        keys = torch.cat([old_keys, keys], dim=1)
        values = self.append(old_values, self.hide(values, mask))
        return keys, self.score.prepare(keys), values, torch.cat([old_mask, mask], dim=1)

    def attend(self, query, prepared, need_weights=True, positions=None):
        _, keys, values, mask = prepared
        weights = masked_softmax(
            self.scores(query, keys, mask, positions), visible(mask.unsqueeze(1), positions)
        )
        weights = self.sharpen(weights)
        return self.context(weights, values, mask), weights if need_weights else None

    def hide(self, values, mask):
        return values.masked_fill(~mask.unsqueeze(-1), 0)  # replaced, not multiplied: padding may be NaN

    def append(self, old, new):
        return torch.cat([old, new], dim=1)

    def scores(self, query, keys, mask, positions):
        return self.score.at(query, keys, positions)

    def sharpen(self, weights):
        return weights

    def context(self, weights, values, mask):
        return weights @ values


class LeaksTheFuture(Sound):
    """Adds the mean of all real values, a global summary that forgets the causal mask."""

    def context(self, weights, values, mask):
        return weights @ values + values.sum(1, keepdim=True) / mask.sum(1)[:, None, None]


class PaddedLengthTemperature(Sound):
    """Divides the scores by the padded length Tk instead of a constant (or the real count)."""

    def scores(self, query, keys, mask, positions):
        return super().scores(query, keys, mask, positions) / mask.size(-1)


class BatchLengthTemperature(Sound):
    """Divides the scores by the batch's mean real length: one sequence's output depends on the others."""

    def scores(self, query, keys, mask, positions):
        return super().scores(query, keys, mask, positions) / mask.sum(-1).to(query.dtype).mean()


class AbsolutePositionBias(Sound):
    """Declares position_free, yet favours later keys by their absolute position."""

    def scores(self, query, keys, mask, positions):
        bias = 0 if positions is None else 0.5 * positions.key[:, None, :]
        return super().scores(query, keys, mask, positions) + bias


class PoisonsThroughPadding(Sound):
    """Keeps padded values as they are: weight 0 times NaN is NaN."""

    def hide(self, values, mask):
        return values.clone()  # a copy, as Sound's: in self-attention the values are the keys' tensor


class DeadParameter(Sound):
    """Declares a learnt temperature that `attend` never applies."""

    def __init__(self, query_dim: int, key_dim: int, value_dim: int, score=None) -> None:
        super().__init__(query_dim, key_dim, value_dim, score)
        self.temperature = nn.Parameter(torch.ones(()))


class MisorderedCache(Sound):
    """`extend` puts the new values before the cached ones."""

    def append(self, old, new):
        return torch.cat([new, old], dim=1)


class SquaredWeights(Sound):
    """Sharpens the weights by squaring them and forgets to renormalise."""

    def sharpen(self, weights):
        return weights**2


# ---------------------------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize(
    "cls, message",
    [
        (TransposedScore, r"^shapes \([^)]*\): score TransposedScore: wrong output shape: scores are"),
        (
            UnusedParameterScore,
            r"^parameters \(every parameter does something\): score UnusedParameterScore \(perturbed "
            r"parameters, train mode\): parameter 'score.unused.weight' \(8, 8\) takes part in no call's "
            "computation",
        ),
        (QueryStepScore, r"^shapes \([^)]*\): score QueryStepScore \(Tq=3, Tk=5\): forward failed"),
    ],
)
def test_broken_scores(cls: type, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        check_score(cls)


@pytest.mark.parametrize(
    "cls, message",
    [
        (IgnoresMask, r"^masking \([^)]*\): .* masked keys receive weight"),
        (RawScoresAsWeights, r"^weights \([^)]*\): .* weights are negative"),
        (Unnormalised, r"^weights \([^)]*\): .* weights do not sum to 1 over the keys each query sees"),
        (
            StandardisedScores,
            r"^single_key \([^)]*\): .* NaN/inf in the context of a sequence with a single valid key",
        ),
        (
            BatchCentred,
            r"^masking \([^)]*\): .* \(self-attention, T=5; initial parameters, eval mode\): the output "
            r"changes when "
            "padded keys/values change",
        ),
        (LeaksPaddedValues, r"^masking \([^)]*\): .* the output changes when padded keys/values change"),
        (FastPathDiffers, r"^fast_path \([^)]*\): .* need_weights=False changes the context"),
    ],
)
def test_broken_attentions(cls: type, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        check_attention(cls)


@pytest.mark.parametrize(
    "cls, check, message",
    [
        (
            LeaksTheFuture,
            "causality",
            "the outputs at positions < 1 change when the sequence ends at position 0 instead of going on "
            "to 4",
        ),
        (PaddedLengthTemperature, "padding", "3 more padded positions change the real outputs"),
        (BatchLengthTemperature, "batch", "sequence 0 alone gets another output than in the batch"),
        (AbsolutePositionBias, "permutation", "permuting the sequence does not permute the outputs"),
        (PoisonsThroughPadding, "finiteness", "nan at padded positions reaches real outputs"),
        (DeadParameter, "parameters", r"parameter 'temperature' \(\) takes part in no call's computation"),
        (
            MisorderedCache,
            "cached_decoding",
            r"step t=1; initial parameters, eval mode, float64, need_weights=True\): the cached step differs "
            "from a full causal pass",
        ),
        (SquaredWeights, "weights", "weights do not sum to 1 over the keys each query sees"),
    ],
)
def test_each_bug_is_caught_by_its_check_alone(cls: type[Attention], check: str, message: str) -> None:
    with pytest.raises(AssertionError, match=rf"^{check} \([^)]*\): attention {cls.__name__}\b.*{message}"):
        check_attention(cls)  # the whole kit stops at this check: every one before it passed
    with pytest.raises(AssertionError, match=rf"^{check} \([^)]*\): "):
        check_attention(cls, checks=(check,))
    also = ALSO.get(cls, ())
    for other in also:
        with pytest.raises(AssertionError, match=rf"^{other} \([^)]*\): "):
            check_attention(cls, checks=(other,))
    others = [name for name in APPLICABLE if name not in (check, *also)]
    assert check_attention(cls, checks=others) == others  # each other check applies, and passes


APPLICABLE = [name for name in CHECKS if name != "reference"]  # Sound ships no reference
# a bug that breaks a second property too: the mean of all values LeaksTheFuture adds is a context term
# the returned weights do not explain; a temperature from the padded length, or from the batch's lengths,
# changes with the tokens after a causal query (their number)
ALSO = {
    LeaksTheFuture: ("weights_used",),
    PaddedLengthTemperature: ("causality",),
    BatchLengthTemperature: ("causality",),
}


def test_the_unbroken_bases_pass_every_check() -> None:
    """Proves that the failures above come from the bugs."""
    assert check_attention(Sound) == APPLICABLE
    assert check_attention(Broken) == [
        c for c in APPLICABLE if c not in ("causality", "permutation", "cached_decoding", "state")
    ]


def test_checks_apply_by_the_capability_flags() -> None:
    assert check_attention(MultiHeadAttention) == APPLICABLE  # no reference: it is the plain formula
    # no self-attention (so no causal checks), position_free: permutation of the keys only
    assert check_attention(NoAttention) == [
        c for c in APPLICABLE if c not in ("causality", "cached_decoding", "state")
    ]
    # a score that uses positions makes permutation meaningless
    assert "permutation" not in check_attention(MultiHeadAttention, DistanceBias)


def test_a_position_score_is_checked_only_where_positions_reach_it() -> None:
    # compiled checks an rnn decoder's call, which gives no positions: not a position score's
    assert check_score(DistanceBias) == [c for c in APPLICABLE if c not in ("permutation", "compiled")]
    for mechanism in (Sound, MultiHeadAttention):
        check_attention(mechanism, DistanceBias)
    assert check_attention(Broken, DistanceBias) == []  # takes no positions: not a legal combination
    assert check_attention(Broken, lambda q, k: DistanceBias(q, k)) == []  # a factory, as configs make


def partial_check(function, *args):
    """`function(*args, checks=...)` as a function of `checks` alone."""
    return lambda checks=None: function(*args, checks=checks)


def test_a_score_that_ignores_its_positions_fails_queries_and_cached_decoding_alone() -> None:
    """A query alone at position i, or a decoding step at t, is scored as if it sat at 0."""
    for check in (
        partial_check(check_score, ArangeDistanceBias),
        partial_check(check_attention, Sound, ArangeDistanceBias),
    ):
        with pytest.raises(
            AssertionError, match=r"^queries \([^)]*\): .*Tq=3.*: query 1 alone gets another output"
        ):
            check()
        with pytest.raises(
            AssertionError, match=r"^cached_decoding \([^)]*\): .*step t=1; .*the cached step differs"
        ):
            check(checks=("cached_decoding",))
        others = [c for c in APPLICABLE if c not in ("queries", "cached_decoding", "permutation", "compiled")]
        assert check(checks=others) == others


def test_the_fused_multi_head_path_keeps_padding_nan_out() -> None:
    """SDPA adds its -inf mask to the scores, NaN + -inf = NaN: multi_head must zero padded keys first."""
    assert check_attention(MultiHeadAttention, "scaled_dot", checks=("finiteness",)) == ["finiteness"]


def test_unknown_check_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown check.*causalty; available: flags, shapes"):
        check_attention(Sound, checks=("causalty",))


def test_flags_must_be_consistent() -> None:
    class CausalWithoutPositions(Sound):
        takes_positions = False

    with pytest.raises(
        AssertionError, match=r"^flags \([^)]*\): attention CausalWithoutPositions: declares causal without"
    ):
        check_attention(CausalWithoutPositions)


def test_shape_checks_alone() -> None:
    check_score_shapes(DotScore)
    check_attention_shapes(MultiHeadAttention, "general", num_heads=2)
    with pytest.raises(AssertionError, match=r"^shapes \([^)]*\): score TransposedScore"):
        check_score_shapes(TransposedScore)
    check_score_shapes(UnusedParameterScore)  # no gradient is a later check's business


def test_wrong_context_shape_and_construction_errors() -> None:
    class WrongDim(Broken):
        def __init__(self, query_dim, key_dim, value_dim, score=None):
            super().__init__(query_dim, key_dim, value_dim, score)
            self.output_dim = value_dim + 1

    with pytest.raises(
        AssertionError,
        match=(
            r"^shapes \([^)]*\): attention WrongDim \(cross-attention, Tq=1, Tk=5; initial parameters, eval "
            r"mode\): "
            r"wrong output shape: "
            r"context is \(3, 1, 5\)"
        ),
    ):
        check_attention(WrongDim)
    with pytest.raises(AssertionError, match="construction failed.*TypeError"):
        check_attention(ScoredAttention, bogus=1)

    def refuses(query_dim: int, key_dim: int) -> Score:
        raise ValueError("no dims suit me")

    with pytest.raises(
        AssertionError, match=r"construction failed for \(query, key, value\) dims .*no dims suit me"
    ):
        check_attention(Broken, score=refuses)


@pytest.mark.slow  # the kit over the whole registry
def test_check_all_pairs_position_scores_with_mechanisms_that_take_positions(
    isolated_registries: None,
) -> None:
    registry("score").register("distance_test")(DistanceBias)
    registry("score").register("arange_test")(ArangeDistanceBias)
    results = {
        (kind, name): error
        for score in ("distance_test", "arange_test")
        for kind, name, error in check_all(score)
    }
    assert results[("score", "distance_test")] is None
    assert results[("attention", "multi_head score=distance_test")] is None
    assert results[("attention", "multi_head score=arange_test")].startswith(
        "queries (each query of a call is computed alone): attention MultiHeadAttention with score "
        "arange_test"
    )
    everything = {pair.label for pair in pairs()}
    assert "local_window score=distance_test" not in everything  # it takes no positions
    assert {"local_window score=dot", "multi_head score=distance_test", "distance_test"} <= everything


def test_a_name_checks_what_hosts_it_or_what_it_hosts_and_nothing_else() -> None:
    """`dot` is Luong's attention and the dot score: the score alone and in every mechanism, the mechanism
    with every score. A mechanism's name brings no score alone and no other mechanism; a score's no other
    score. Which pairs are checked is the question: `pairs` lists them without running the kit."""
    load_all()
    labels = {name: {pair.label for pair in pairs(name)} for name in ("dot", "general", "bahdanau", "linear")}
    assert {"dot", "multi_head score=dot", "dot score=dot", "dot score=general"} <= labels["dot"]
    assert "multi_head score=general" not in labels["dot"] and "none" not in labels["dot"]
    assert {"general", "dot score=general", "multi_head score=general"} <= labels["general"]
    assert not {label for label in labels["general"] if "score=" not in label} - {"general"}  # no other alone
    assert all(
        label.startswith("additive score=") for label in labels["bahdanau"]
    )  # no score alone, no linear
    assert labels["linear"] == {"linear"}
    [multi_head] = [pair.subject for pair in pairs("dot") if pair.label == "multi_head score=dot"]
    assert multi_head.vary == () and [pair.subject.vary for pair in pairs("dot") if pair.label == "dot"] == [
        ("score",)
    ]
