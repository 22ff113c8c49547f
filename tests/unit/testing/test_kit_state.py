"""The kit's `state` check holds a causal mechanism to the state it declares (`Attention.state_size`), and
`cached_decoding` lets a mechanism whose state does not grow answer a cached step without weights."""

import pytest
import torch
from test_kit import Sound

from attnx.nn.attention import Attention, visible
from attnx.nn.multihead import MultiHeadAttention
from attnx.nn.scores import AdditiveScore, DotScore
from attnx.testing import check_attention, check_score


class ForgetsItsValues(Sound):
    """Declares its keys alone, n·D, while its cache keeps the values too."""

    def state_size(self, n):
        return n * self.key_dim


class ClaimsConstant(Sound):
    """Keeps every key and value, yet declares the state of one token, as if it were recurrent."""

    def state_size(self, n):
        return self.key_dim + self.value_dim


class Undeclared(Sound):
    state_size = Attention.state_size


class RunningMean(Attention):
    """c_i = the mean of the real values v_j, j ≤ i (causal mean pooling). `prepare` keeps the values;
    `extend` folds them into the running [Σ_j m_j v_j, Σ_j m_j], [B, 1, D + 1], and adds each new token to
    it: a state that stops growing after one token, from which a step has no per-key weights to return."""

    default_score = None
    takes_positions = causal = incremental = True

    def prepare(self, keys, values, mask):
        return values.masked_fill(~mask.unsqueeze(-1), 0), mask

    def extend(self, prepared, keys, values, mask):
        new = self.summed(*self.prepare(keys, values, mask))
        return prepared + new if isinstance(prepared, torch.Tensor) else self.summed(*prepared) + new

    @staticmethod
    def summed(values, mask):
        return torch.cat([values, mask.unsqueeze(-1).to(values.dtype)], -1).sum(1, keepdim=True)

    def attend(self, query, prepared, need_weights=True, positions=None):
        if isinstance(prepared, torch.Tensor):  # the running sums: every key so far is visible
            context = prepared[..., :-1] / prepared[..., -1:].clamp_min(1)
            return context.expand(-1, query.size(1), -1), None
        values, mask = prepared
        seen = visible(mask.unsqueeze(1), positions).to(values.dtype).expand(-1, query.size(1), -1)
        weights = seen / seen.sum(-1, keepdim=True).clamp_min(1)
        return weights @ values, weights if need_weights else None

    def state_size(self, n):
        return n * self.value_dim if n == 1 else self.value_dim + 1


class GrowingRunningMean(RunningMean):
    """The same cache, declared as one that grows: its weightless steps are then refused."""

    def state_size(self, n):
        return n * (self.value_dim + 1)


def test_multi_head_and_softmax_attention_keep_what_they_declare() -> None:
    assert check_attention(MultiHeadAttention, checks=("state",)) == ["state"]
    assert check_attention(MultiHeadAttention, "additive", checks=("state",)) == ["state"]  # + U·k per head
    assert check_attention(Sound, checks=("state",)) == ["state"]
    # softmax attention re-prepares: the site keeps its n·D inputs, the masked values are the state, and
    # additive's U·k is kept beside them
    for score in (DotScore, AdditiveScore):
        assert check_score(score, checks=("state",)) == ["state"]


def test_a_mechanism_that_under_declares_fails_with_each_n() -> None:
    with pytest.raises(
        AssertionError,
        match=(
            r"^state \([^)]*\): attention ForgetsItsValues \(causal self-attention; perturbed parameters, "
            r"eval mode, "
            r"float64\): decoding token by token, the site's cache holds other numbers per sequence than "
            r"ForgetsItsValues.state_size\(n\) declares .*: n=1: declared 8, found 16; "
            r"n=2: declared 16, found 32;.* n=67: declared 536, found 1072$"
        ),
    ):
        check_attention(ForgetsItsValues)  # every check before state passes


def test_a_growing_cache_declared_constant_fails_from_the_second_token() -> None:
    with pytest.raises(
        AssertionError, match=r"^state \([^)]*\): .*declares .*: n=2: declared 16, found 32; n=3: "
    ):
        check_attention(ClaimsConstant, checks=("state",))
    # a recurrent cache (constant after a token) declared as such passes, weightless steps and all
    assert check_attention(RunningMean, checks=("cached_decoding", "state")) == ["cached_decoding", "state"]


def test_an_undeclared_causal_mechanism_is_told_to_declare() -> None:
    with pytest.raises(
        AssertionError,
        match=(
            r"^state \([^)]*\): attention Undeclared .*: Undeclared.state_size\(n\) returns None: declare "
            r"the "
            r"numbers .* overriding `Attention.state_size`; a K/V cache of width D keeps 2·n·D"
        ),
    ):
        check_attention(Undeclared, checks=("state",))
    assert "state" not in check_attention(Undeclared, checks=("causality", "cached_decoding"))


def test_only_a_state_that_does_not_grow_may_leave_out_a_cached_steps_weights() -> None:
    with pytest.raises(
        AssertionError,
        match=(
            r"^cached_decoding \([^)]*\): .*step t=1; .*need_weights=True\): a cached step asked for weights "
            r"returned None, while the full pass returns them; only a mechanism whose state does not grow "
            r"\(state_size\(2n\) == state_size\(n\); "
            r"GrowingRunningMean declares 18 at n=2\) may"
        ),
    ):
        check_attention(GrowingRunningMean, checks=("cached_decoding",))


def test_a_mechanism_that_never_returns_weights_passes_cached_decoding() -> None:
    """Nothing to compare but the context: a step returns no weights when the full pass returns none."""

    class NoWeights(MultiHeadAttention):
        def attend(self, query, prepared, need_weights=True, positions=None):
            return super().attend(query, prepared, False, positions)[0], None

    assert check_attention(NoWeights, checks=("cached_decoding", "state")) == ["cached_decoding", "state"]
