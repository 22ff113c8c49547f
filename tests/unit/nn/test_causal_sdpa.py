"""`multi_head`'s fused path runs causal self-attention on SDPA's own causal mask (`is_causal`, O(N)
memory) when the visible keys are exactly j ≤ i by index, and on the explicit [B, 1, Tq, Tk] mask from
`visible` otherwise (padding, a decoding step or chunk with Tq < Tk, positions that are not the keys'):
both equal the explicit softmax path's (need_weights=True) outputs in float64, padded rows included.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

from attnx.models.lm import CausalLM
from attnx.nn.attention import Mechanism
from attnx.nn.multihead import MultiHeadAttention
from attnx.nn.positions import Positions

D, HEADS, N = 16, 4, 9


@dataclass
class Call:
    is_causal: bool
    masked: bool  # an attn_mask was passed
    dropout_p: float


@pytest.fixture
def sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    """What each F.scaled_dot_product_attention call received (attnx.nn.multihead's F is torch's)."""
    calls: list[Call] = []
    sdpa = F.scaled_dot_product_attention

    def recording(*args: object, **kwargs: object) -> torch.Tensor:
        calls.append(
            Call(
                bool(kwargs.get("is_causal", False)),
                kwargs.get("attn_mask") is not None,
                float(kwargs.get("dropout_p", 0.0)),  # type: ignore[arg-type]
            )
        )
        return sdpa(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    return calls


@pytest.fixture
def no_square(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the [Tq, Tk] relative positions (the causal mask's source) fails the test."""

    def refuse(self: Positions, ndim: int = 3) -> torch.Tensor:
        raise AssertionError("the causal fast path built the Tq×Tk relative positions")

    monkeypatch.setattr(Positions, "relative", refuse)


def mechanism() -> MultiHeadAttention:
    torch.manual_seed(0)
    return MultiHeadAttention(D, D, D, num_heads=HEADS).double().eval()


def inputs(batch: int = 2, n: int = N) -> torch.Tensor:
    return torch.randn(batch, n, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def both(
    att: MultiHeadAttention, x: torch.Tensor, mask: torch.Tensor, at: Positions
) -> tuple[torch.Tensor, torch.Tensor]:
    """(fused context, explicit context): need_weights False, then True (masked softmax, no SDPA)."""
    fused, _ = att(x, x, x, mask, need_weights=False, positions=at)
    explicit, _ = att(x, x, x, mask, need_weights=True, positions=at)
    return fused, explicit


def test_aligned_causal_self_attention_takes_the_kernel_mask_and_equals_explicit(
    sdpa_calls: list[Call],
) -> None:
    att, x = mechanism(), inputs().requires_grad_()
    mask = torch.ones(2, N, dtype=torch.bool)
    at = Positions.self_attention(N, causal=True)
    fused, explicit = both(att, x, mask, at)
    assert sdpa_calls == [Call(is_causal=True, masked=False, dropout_p=0.0)]
    torch.testing.assert_close(fused, explicit, rtol=1e-12, atol=1e-12)
    grad = torch.randn_like(fused)
    (fused_grad,) = torch.autograd.grad(fused, x, grad)
    (explicit_grad,) = torch.autograd.grad(explicit, x, grad)
    torch.testing.assert_close(fused_grad, explicit_grad, rtol=1e-12, atol=1e-12)


def test_equal_position_tensors_are_aligned_too(sdpa_calls: list[Call]) -> None:
    """A transformer decoder's teacher forcing: queries span(T, start=0) and keys span(T), two tensors."""
    att, x = mechanism(), inputs()
    at = Positions(Positions.span(N), Positions.span(N), causal=True)
    fused, explicit = both(att, x, torch.ones(2, N, dtype=torch.bool), at)
    assert [c.is_causal for c in sdpa_calls] == [True]
    torch.testing.assert_close(fused, explicit, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_falls_back_to_the_explicit_mask(side: str, sdpa_calls: list[Call]) -> None:
    """Every row with a visible key is compared: right padding's padded queries too (under is_causal they
    would see padded keys), left padding's real queries (they would); a left-padded query before its
    sequence's first real token sees no key, outside `masked_softmax`'s contract."""
    att, x = mechanism(), inputs()
    real = torch.arange(N) < torch.tensor([N, 4])[:, None]
    mask = real if side == "right" else real.flip(-1)
    fused, explicit = both(att, x, mask, Positions.self_attention(N, causal=True))
    assert sdpa_calls == [Call(is_causal=False, masked=True, dropout_p=0.0)]
    rows = torch.ones_like(mask) if side == "right" else mask
    torch.testing.assert_close(fused[rows], explicit[rows], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("query", "key"),
    [
        (list(range(N)), [2 * j for j in range(N)]),  # same size and first position, keys spread
        (list(range(N))[::-1], list(range(N))[::-1]),  # aligned but decreasing: j ≤ i by index is wrong
        ([0, 1, 1, 2, 3, 4, 5, 6, 7], [0, 1, 1, 2, 3, 4, 5, 6, 7]),  # a repeated position
    ],
)
def test_positions_other_than_index_order_fall_back(
    query: list[int], key: list[int], sdpa_calls: list[Call]
) -> None:
    att, x = mechanism(), inputs()
    same = query == key
    q = torch.tensor(query)[None]
    at = Positions(q, q if same else torch.tensor(key)[None], causal=True)
    fused, explicit = both(att, x, torch.ones(2, N, dtype=torch.bool), at)
    assert [c.is_causal for c in sdpa_calls] == [False]
    torch.testing.assert_close(fused, explicit, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("width", [1, 3])
def test_cached_decoding_step_equals_the_full_pass(width: int, sdpa_calls: list[Call]) -> None:
    """Queries t..t+width-1 against cached keys 0..t+width-1 (prepare, extend, attend_at): SDPA's is_causal
    would align its mask top-left (query t seeing keys 0..0), so these take the explicit mask."""
    att, x = mechanism(), inputs()
    mask = torch.ones(2, N, dtype=torch.bool)  # no padding: only the alignment rules is_causal out
    full, _ = att(x, x, x, mask, need_weights=True, positions=Positions.self_attention(N, causal=True))
    start = N - width - 2
    end = start + width
    cache = att.prepare(x[:, :start], x[:, :start], mask[:, :start])
    cache = att.extend(cache, x[:, start:end], x[:, start:end], mask[:, start:end])
    at = Positions(Positions.span(width, start=start), Positions.span(end), causal=True)
    step, _ = att.attend_at(x[:, start:end], cache, at, need_weights=False)
    assert sdpa_calls == [Call(is_causal=False, masked=True, dropout_p=0.0)]
    torch.testing.assert_close(step, full[:, start:end], rtol=1e-12, atol=1e-12)


@pytest.mark.usefixtures("no_square")
def test_the_lm_never_builds_the_square_mask_without_padding(sdpa_calls: list[Call]) -> None:
    torch.manual_seed(0)
    heads = Mechanism(MultiHeadAttention, None, {"num_heads": HEADS})
    lm = CausalLM(20, heads, d_model=D, num_layers=2).eval()
    logits, _ = lm(torch.randint(4, 20, (2, N)), torch.tensor([N, N]))
    assert [c.is_causal and not c.masked for c in sdpa_calls] == [True, True] and logits.isfinite().all()


@pytest.mark.usefixtures("no_square")
def test_training_keeps_dropout_on_the_causal_path(sdpa_calls: list[Call]) -> None:
    torch.manual_seed(0)
    att = MultiHeadAttention(D, D, D, num_heads=HEADS, dropout=0.25).train()
    x = torch.randn(1, N, D)
    att(
        x,
        x,
        x,
        torch.ones(1, N, dtype=torch.bool),
        need_weights=False,
        positions=Positions.self_attention(N, True),
    )
    assert sdpa_calls == [Call(is_causal=True, masked=False, dropout_p=0.25)]
