"""Attention mechanisms: every legal mechanism × score through the kit, none/fixed_c semantics,
masking edge cases, and the fused SDPA path of multi-head attention against the explicit one."""

import pytest
import torch
import torch.nn.functional as F

from attnx.nn.attention import masked_softmax
from attnx.nn.classic import BahdanauAttention, FixedContext, LuongAttention, NoAttention
from attnx.nn.multihead import MultiHeadAttention
from attnx.nn.scores import AdditiveScore, DotScore, GeneralScore, ScaledDotScore
from attnx.registry import get, registry
from attnx.testing import check_all, check_attention

SCORES = ["dot", "scaled_dot", "general", "additive", "cosine"]
LENGTHS = torch.tensor([5, 3, 1])
MASK = torch.arange(5) < LENGTHS[:, None]


@pytest.mark.slow  # a kit run per pair; each mechanism alone: below, each score alone: test_scores.py
@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("mechanism", ["additive", "dot", "multi_head"])
def test_every_mechanism_with_every_score_passes_the_kit(mechanism: str, score: str) -> None:
    check_attention(get("attention", mechanism), score)


@pytest.mark.parametrize("mechanism", ["none", "fixed_c", "additive", "dot", "multi_head"])
def test_default_score_passes_the_kit(mechanism: str) -> None:
    check_attention(get("attention", mechanism))


def test_multi_head_hyperparams_pass_the_kit() -> None:
    check_attention(MultiHeadAttention, "general", num_heads=2)
    check_attention(MultiHeadAttention, num_heads=1, dropout=0.5)  # the kit runs in eval mode


def built_in(kind: str, label: str) -> bool:
    """Whether a check_all label ("dot", "multi_head score=cosine") names built-ins only: plugins that
    other tests registered in this process (some deliberately incomplete) are theirs to check."""
    name, _, score = label.partition(" score=")
    names = [(kind, name), *([("score", score)] if score else [])]
    return all(registry(k).entry(n).origin == "built-in" for k, n in names)


@pytest.mark.slow  # the kit over the whole registry
def test_check_all_passes_on_builtins() -> None:
    results = {(kind, name): error for kind, name, error in check_all() if built_in(kind, name)}
    assert ("attention", "multi_head score=cosine") in results and ("attention", "none") in results
    assert ("attention", "none score=dot") not in results  # mechanisms without a score run alone
    assert {k: e for k, e in results.items() if e is not None} == {}


def test_placements_and_defaults() -> None:
    table = {
        n: (get("attention", n).placement, get("attention", n).default_score)
        for n in ["none", "fixed_c", "additive", "dot", "multi_head"]
    }
    assert table == {
        "none": ("none", None),
        "fixed_c": ("fixed_c", None),
        "additive": ("before", "additive"),
        "dot": ("after", "dot"),
        "multi_head": ("after", "scaled_dot"),
    }
    assert type(BahdanauAttention(4, 4, 4).score) is AdditiveScore
    assert type(LuongAttention(4, 4, 4).score) is DotScore
    assert type(LuongAttention(4, 6, 4, score=GeneralScore).score) is GeneralScore
    assert (
        LuongAttention(4, 4, 4).input_feeding
        and not LuongAttention(4, 4, 4, input_feeding=False).input_feeding
    )
    assert (
        type(MultiHeadAttention(8, 8, 8).score) is ScaledDotScore
        and MultiHeadAttention(8, 8, 8).score.key_dim == 2
    )


def test_none_is_mean_over_unmasked_values() -> None:
    values = torch.randn(3, 5, 4)
    values[~MASK] = float("nan")  # padding must not reach the mean
    ctx, weights = NoAttention(6, 4, 4)(torch.randn(3, 2, 6), values, values, MASK)
    assert weights is None and ctx.shape == (3, 2, 4)
    for b, n in enumerate(LENGTHS):
        torch.testing.assert_close(ctx[b], values[b, :n].mean(0).expand(2, 4))


def test_fixed_c_returns_the_summary_at_every_step() -> None:
    att = FixedContext(6, 4, 4)
    states, summary = torch.randn(3, 5, 4), torch.randn(3, 4)
    keys, values, mask = att.memory(states, summary, MASK)
    assert keys.shape == values.shape == (3, 1, 4) and mask.all() and mask.shape == (3, 1)
    ctx, weights = att(torch.randn(3, 7, 6), keys, values, mask)
    assert weights is None
    torch.testing.assert_close(ctx, summary[:, None].expand(3, 7, 4))


def test_masked_softmax_edge_cases() -> None:
    scores = torch.randn(3, 2, 5) * 50
    weights = masked_softmax(scores, MASK[:, None])
    assert (weights[~MASK[:, None].expand_as(weights)] == 0).all()
    assert (weights[2, :, 0] == 1).all() and not weights.isnan().any()  # one valid key: exactly 1
    torch.testing.assert_close(masked_softmax(scores, torch.ones(5, dtype=torch.bool)), scores.softmax(-1))


@pytest.mark.parametrize("cls", [BahdanauAttention, LuongAttention, MultiHeadAttention])
def test_nan_padding_and_single_key(cls: type) -> None:
    att = cls(8, 8, 8)
    keys = torch.randn(3, 5, 8)
    keys[~MASK] = float("nan")
    ctx, weights = att(torch.randn(3, 2, 8), keys, keys, MASK)
    assert torch.isfinite(ctx).all()
    assert (weights[2, ..., 0] == 1).all() and (weights[2, ..., 1:] == 0).all()


def test_multi_head_refuses_indivisible_heads() -> None:
    with pytest.raises(ValueError, match="num_heads=3.*query_dim=8"):
        MultiHeadAttention(8, 8, 8, num_heads=3)


def test_multi_head_prepare_projects_keys_once() -> None:
    att = MultiHeadAttention(8, 6, 5)
    calls = {"W_q": 0, "W_k": 0, "W_v": 0}
    for name in calls:
        getattr(att, name).register_forward_hook(lambda *_, n=name: calls.__setitem__(n, calls[n] + 1))
    prepared = att.prepare(torch.randn(3, 5, 6), torch.randn(3, 5, 5), MASK)
    for _ in range(4):  # a decoder's time loop
        ctx, weights = att.attend(torch.randn(3, 1, 8), prepared)
    assert calls == {"W_q": 4, "W_k": 1, "W_v": 1}
    assert ctx.shape == (3, 1, 8) and weights.shape == (3, 4, 1, 5)


@pytest.mark.parametrize("tq", [1, 4])
def test_sdpa_equals_explicit_path_with_grads(tq: int, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **kw: calls.append(1) or sdpa(*a, **kw))
    att = MultiHeadAttention(16, 12, 10, num_heads=4).eval()
    inputs = [torch.randn(3, tq, 16), torch.randn(3, 5, 12), torch.randn(3, 5, 10)]

    def run(need_weights: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        att.zero_grad()
        xs = [x.clone().requires_grad_() for x in inputs]
        ctx, weights = att(*xs, MASK, need_weights=need_weights)
        assert (weights is None) != need_weights
        (ctx * torch.linspace(-1, 1, ctx.numel()).view_as(ctx)).sum().backward()
        return ctx, [x.grad for x in xs] + [p.grad.clone() for p in att.parameters()]

    explicit, explicit_grads = run(True)
    assert calls == []
    fused, fused_grads = run(False)
    assert calls == [1]
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=0)
    for a, b in zip(fused_grads, explicit_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_sdpa_only_for_exactly_scaled_dot(monkeypatch: pytest.MonkeyPatch) -> None:
    class TemperedScaledDot(ScaledDotScore):
        def forward(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
            return 2 * super().forward(query, prepared)

    monkeypatch.setattr(F, "scaled_dot_product_attention", None)  # any call would crash
    for score in (DotScore, TemperedScaledDot):
        att = MultiHeadAttention(8, 8, 8, score=score)
        ctx, _ = att(
            torch.randn(3, 2, 8), torch.randn(3, 5, 8), torch.randn(3, 5, 8), MASK, need_weights=False
        )
        assert ctx.shape == (3, 2, 8)
