"""Score functions: values against their equations, shapes with leading dims, dim checks, the kit."""

import math
from functools import partial
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from attnx.nn.scores import AdditiveScore, CosineScore, DotScore, GeneralScore, ScaledDotScore, build_score
from attnx.registry import get
from attnx.testing import check_score

q = torch.randn(2, 3, 4, 6)  # [B, H, Tq, d]: the leading dims multi-head uses
k = torch.randn(2, 3, 5, 6)


@pytest.mark.parametrize(
    "name, hp",
    [
        ("dot", {}),
        ("scaled_dot", {}),
        ("general", {}),
        ("additive", {}),
        ("additive", {"hidden_dim": 3}),
        ("cosine", {}),
        ("cosine", {"temperature": 0.5, "learn_temperature": True}),
    ],
)
def test_builtin_scores_pass_the_kit(name: str, hp: dict) -> None:
    check_score(get("score", name), **hp)


def test_dot_and_scaled_dot() -> None:
    expected = torch.einsum("bhqd,bhkd->bhqk", q, k)
    torch.testing.assert_close(DotScore(6, 6)(q, k), expected)
    torch.testing.assert_close(ScaledDotScore(6, 6)(q, k), expected / math.sqrt(6))


def test_general_is_bilinear_with_prepared_Wk() -> None:
    score = GeneralScore(6, 4)
    keys = torch.randn(2, 5, 4)
    query = torch.randn(2, 3, 6)
    torch.testing.assert_close(score.prepare(keys), keys @ score.W.weight.T)
    expected = torch.einsum("bqi,ij,bkj->bqk", query, score.W.weight, keys)
    torch.testing.assert_close(score(query, score.prepare(keys)), expected)


def test_additive_matches_equation_and_prepares_Uk() -> None:
    score = AdditiveScore(6, 4, hidden_dim=7)
    query, keys = torch.randn(2, 3, 6), torch.randn(2, 5, 4)
    prepared = score.prepare(keys)
    torch.testing.assert_close(prepared, score.U(keys))
    expected = torch.empty(2, 3, 5)
    for i in range(3):
        for j in range(5):
            hidden = torch.tanh(score.W(query[:, i]) + score.U(keys[:, j]))
            expected[:, i, j] = score.v(hidden).squeeze(-1)
    torch.testing.assert_close(score(query, prepared), expected)
    assert AdditiveScore(6, 4).W.out_features == 4  # hidden_dim defaults to key_dim


def test_cosine_is_bounded_cosine_over_temperature() -> None:
    score = CosineScore(6, 6, temperature=0.2)
    expected = F.cosine_similarity(q.unsqueeze(-2), k.unsqueeze(-3), dim=-1) / 0.2
    out = score(q, score.prepare(k))
    torch.testing.assert_close(out, expected)
    assert out.abs().max() <= 1 / 0.2 + 1e-5
    assert list(score.parameters()) == []  # fixed temperature is a buffer
    learned = CosineScore(6, 6, temperature=0.2, learn_temperature=True)
    assert learned.log_tau.exp().item() == pytest.approx(0.2)
    out = learned(q, learned.prepare(k))
    out.sum().backward()
    torch.testing.assert_close(learned.log_tau.grad, -out.sum().detach())  # d(cos / e^t)/dt = -cos / e^t


@pytest.mark.parametrize("cls", [DotScore, ScaledDotScore, CosineScore])
def test_dot_family_refuses_different_dims(cls: type) -> None:
    with pytest.raises(ValueError, match="query_dim=6 and key_dim=4"):
        cls(6, 4)


@pytest.mark.parametrize("cls", [DotScore, ScaledDotScore, GeneralScore, AdditiveScore, CosineScore])
def test_leading_dims(cls: type) -> None:
    score = cls(6, 6)
    assert score(q, score.prepare(k)).shape == (2, 3, 4, 5)
    assert score(q[..., :1, :], score.prepare(k)).shape == (2, 3, 1, 5)


class PerHead(DotScore):
    """A score with per-head parameters: it takes `num_heads`."""

    def __init__(self, query_dim: int, key_dim: int, num_heads: int = 1) -> None:
        super().__init__(query_dim, key_dim)
        self.num_heads = num_heads


class PerHeadScaled(PerHead):
    """A subclass that adds one argument and passes the rest on, `num_heads` among them."""

    def __init__(self, *args: Any, scale: float = 1.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scale = scale


@pytest.mark.parametrize("factory", [PerHead, PerHeadScaled, partial(PerHeadScaled, scale=2.0)], ids=str)
def test_a_score_that_takes_num_heads_gets_it_through_kwargs_too(factory: Any) -> None:
    assert build_score(factory, 4, 4, num_heads=3).num_heads == 3


def test_a_score_without_num_heads_is_built_without_it() -> None:
    assert isinstance(build_score(partial(DotScore), 4, 4, num_heads=3), DotScore)
