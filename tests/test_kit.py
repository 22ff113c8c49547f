"""The conformance kit catches each way a plugin can break the contract, with a message saying which."""

import pytest
import torch
from torch import nn

from attnx import Attention, Score
from attnx.nn.attention import ScoredAttention, masked_softmax
from attnx.nn.scores import DotScore
from attnx.testing import check_attention, check_score


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


class Broken(ScoredAttention):
    """softmax attention with one deliberate bug per subclass."""

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


class PaddedLengthTemperature(Broken):
    def weights(self, scores, mask):
        return masked_softmax(scores / mask.size(-1), mask)


class BatchCentred(Broken):
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


@pytest.mark.parametrize(
    "cls, message",
    [
        (TransposedScore, "wrong output shape: scores are"),
        (UnusedParameterScore, "parameter 'score.unused.weight' receives no gradient"),
        (QueryStepScore, r"\(Tq=3\): forward failed"),
    ],
)
def test_broken_scores(cls: type, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        check_score(cls)


@pytest.mark.parametrize(
    "cls, message",
    [
        (IgnoresMask, "masked keys receive weight"),
        (RawScoresAsWeights, "weights are negative"),
        (Unnormalised, "weights do not sum to 1 over unmasked keys"),
        (StandardisedScores, "NaN/inf in the context of a sequence with a single valid key"),
        (PaddedLengthTemperature, "batch results differ from one-sequence-at-a-time results"),
        (BatchCentred, "batch results differ from one-sequence-at-a-time results"),
        (LeaksPaddedValues, "the output changes when masked keys/values change"),
        (FastPathDiffers, "need_weights=False changes the context"),
    ],
)
def test_broken_attentions(cls: type, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        check_attention(cls)


def test_wrong_context_shape_and_construction_errors() -> None:
    class WrongDim(Broken):
        def __init__(self, query_dim, key_dim, value_dim, score=None):
            super().__init__(query_dim, key_dim, value_dim, score)
            self.output_dim = value_dim + 1

    with pytest.raises(AssertionError, match=r"\(Tq=1\): wrong output shape: context is \(3, 1, 5\)"):
        check_attention(WrongDim)
    with pytest.raises(AssertionError, match="construction failed.*TypeError"):
        check_attention(ScoredAttention, bogus=1)

    def refuses(query_dim: int, key_dim: int) -> Score:
        raise ValueError("no dims suit me")

    with pytest.raises(
        AssertionError, match=r"construction failed for \(query, key, value\) dims .*no dims suit me"
    ):
        check_attention(Broken, score=refuses)


def test_passing_plugin_passes() -> None:
    check_attention(Broken)  # the unbroken base: proves the failures above come from the bugs
