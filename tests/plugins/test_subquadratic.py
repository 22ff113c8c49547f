"""The sub-quadratic mechanisms shipped in attnx.contrib: linear attention (Katharopoulos et al. 2020) and
sliding-window attention (Longformer). Their fast paths equal explicit full-matrix references (the tests'
and the `reference` each ships), never build a Tq×Tk tensor, decode from a cache that stops growing (linear's
recurrent state, the sliding window's last w keys) as they teacher-force, and pass the conformance kit."""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from attnx.contrib.linear import LinearState
from attnx.nn.attention import Attention
from attnx.nn.positions import Positions
from attnx.plugins import describe
from attnx.registry import get, load_all
from attnx.testing import check_attention, projection_loss

from helpers.paths import REPO
from helpers.stepwise import assert_matches_reference, decoded, padded, perturbed, shapes

D, H = 16, 2


def plugin(kind: str, name: str) -> type:
    load_all()  # the shipped plugins, through attnx's own entry points
    return get(kind, name)


def inputs(n: int, short: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """x [2, n, D] and its key mask: one full sequence and one of `short` (default 3n/5) tokens, with NaN
    in its padding (padding must be replaced, not multiplied by 0)."""
    mask = torch.arange(n) < torch.tensor([n, n * 3 // 5 if short is None else short])[:, None]
    return torch.randn(2, n, D).masked_fill(~mask[..., None], math.nan), mask


def heads(att: Attention, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """q, k, v per head [B, H, N, d] from the mechanism's own projections (padding zeroed first)."""
    x = x.nan_to_num(0.0)
    return tuple(
        W(x).unflatten(-1, (att.num_heads, att.head_dim)).transpose(1, 2) for W in (att.W_q, att.W_k, att.W_v)
    )


def close(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> None:
    """Equal over the real queries' rows to float32 precision."""
    torch.testing.assert_close(a[mask], b[mask], atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# Linear attention


def linear(**hyperparams: int) -> Attention:
    return plugin("attention", "linear")(D, D, D, num_heads=H, **hyperparams).eval()


def linear_reference(att: Attention, x: torch.Tensor, mask: torch.Tensor, causal: bool) -> tuple:
    """(output, A): A = φ(q)φ(k)ᵀ masked (key padding, and the lower triangle when causal), rows
    normalised, applied to V; φ = elu + 1."""
    q, k, v = heads(att, x)
    a = (F.elu(q) + 1) @ (F.elu(k) + 1).transpose(-1, -2)
    seen = mask[:, None, None, :]
    if causal:
        seen = seen & torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()
    a = a.masked_fill(~seen, 0)
    a = a / a.sum(-1, keepdim=True)
    return att.W_o((a @ v).transpose(1, 2).flatten(2)), a


@pytest.mark.parametrize("causal", [True, False])
def test_linear_fast_path_equals_the_explicit_kernel_matrix(causal: bool) -> None:
    att, n = linear(), 150  # causal: several chunks, the last one partial
    x, mask = inputs(n)
    expected, _ = linear_reference(att, x, mask, causal)
    out, weights = att(x, x, x, mask, need_weights=False, positions=Positions.self_attention(n, causal))
    assert weights is None
    close(out, expected, mask)
    if not causal:  # cross-attention and pooling: no positions at all
        close(att(x, x, x, mask, need_weights=False)[0], expected, mask)


@pytest.mark.parametrize("causal", [True, False])
def test_linear_weights_are_the_matrix_it_applies(causal: bool) -> None:
    att, n = linear(), 70
    x, mask = inputs(n)
    expected, reference = linear_reference(att, x, mask, causal)
    out, weights = att(x, x, x, mask, positions=Positions.self_attention(n, causal))
    assert weights.shape == (2, H, n, n)
    close(out, expected, mask)
    real = mask[:, None, :, None].expand_as(weights)  # the real queries' rows
    torch.testing.assert_close(weights[real], reference[real], atol=1e-6, rtol=1e-5)
    sums = weights.sum(-1)[real[..., 0]]
    torch.testing.assert_close(sums, torch.ones_like(sums))
    hidden = ~mask[:, None, None, :] | (torch.ones(n, n, dtype=torch.bool).triu(1) & causal)
    assert (weights[hidden.expand_as(weights) & real] == 0).all()


def test_linear_decodes_from_its_recurrent_state_as_the_full_causal_pass() -> None:
    """Token by token in float64 up to t = 70 (past two chunks), padding included: every step equals the
    chunked causal pass. From the step where S' is the smaller cache (n·2d > d(d + 1): n = 5 at d = 8) the
    cache is S' alone, one [B, H, d, d + 1] tensor at every later step; such a step asked for weights gives
    the same context and none, and refuses several causal queries at once."""
    att, n, d = perturbed(linear()), 71, D // H
    x, mask = padded(n, D)
    full, _ = att(x, x, x, mask, need_weights=False, positions=Positions.self_attention(n, causal=True))
    steps, caches = decoded(att, x, mask)
    torch.testing.assert_close(steps[mask], full[mask])
    assert not isinstance(caches[3], LinearState)
    assert all(isinstance(c, LinearState) and shapes(c) == [(3, H, d, d + 1)] for c in caches[4:])
    assert [att.state_size(k) for k in (1, 4, 5, 71, 10**6)] == [2 * D, 8 * D, *[H * d * (d + 1)] * 3]
    last = Positions(Positions.span(1, start=n - 1), Positions.span(n), causal=True)
    context, weights = att.attend_at(x[:, -1:], caches[-1], last, need_weights=True)
    assert weights is None
    torch.testing.assert_close(context, steps[:, -1:], equal_nan=True)  # NaN: padded queries
    with pytest.raises(ValueError, match="answers one causal query at a time, got 2"):
        att.attend_at(x[:, -2:], caches[-1], Positions(Positions.span(2, start=n - 2), last.key, True))


def test_linear_refuses_heads_that_do_not_divide_the_width() -> None:
    with pytest.raises(ValueError, match="LinearAttention needs num_heads to divide query_dim"):
        plugin("attention", "linear")(10, 10, 10, num_heads=4)


# ---------------------------------------------------------------------------------------------
# Sliding-window attention


def sliding(score: str = "scaled_dot", window: int = 8) -> Attention:
    cls = plugin("attention", "sliding_window")
    factory = plugin("score", score) if score in ("alibi", "rope") else get("score", score)
    return cls(D, D, D, factory, num_heads=H, window=window).eval()


def band_reference(att: Attention, x: torch.Tensor, mask: torch.Tensor, causal: bool, score: str):
    """softmax over q·k/√d (minus ALiBi's m_h·|i − j|) restricted to real keys in the band, @ V."""
    q, k, v = heads(att, x)
    n, w = x.size(1), att.window
    scores = q @ k.transpose(-1, -2) / math.sqrt(att.head_dim)
    distance = (torch.arange(n)[None] - torch.arange(n)[:, None]).abs()
    if score == "alibi":
        slopes = sys.modules[plugin("score", "alibi").__module__].alibi_slopes(att.num_heads)
        scores = scores - slopes[:, None, None] * distance
    band = distance < w
    if causal:
        band = band.tril()
    weights = torch.softmax(scores.masked_fill(~(band & mask[:, None, None, :]), -math.inf), -1)
    return att.W_o((weights @ v).transpose(1, 2).flatten(2))


@pytest.mark.parametrize("score", ["scaled_dot", "alibi"])
@pytest.mark.parametrize("causal", [True, False])
def test_sliding_window_banded_path_equals_the_band_masked_full_matrix(causal: bool, score: str) -> None:
    att, n = sliding(score), 45  # 6 blocks of 8, the last partial
    x, mask = inputs(n)
    at = Positions.self_attention(n, causal)
    banded, none = att(x, x, x, mask, need_weights=False, positions=at)
    direct, weights = att(x, x, x, mask, need_weights=True, positions=at)
    assert none is None and weights.shape == (2, H, n, n)
    close(banded, direct, mask)
    close(banded, band_reference(att, x, mask, causal, score), mask)


@pytest.mark.parametrize("causal", [True, False])
def test_sliding_window_banded_path_hands_each_block_its_positions(causal: bool) -> None:
    att, n = sliding("rope", window=5), 23
    x, mask = inputs(n)
    at = Positions.self_attention(n, causal)
    close(att(x, x, x, mask, need_weights=False, positions=at)[0], att(x, x, x, mask, positions=at)[0], mask)


@pytest.mark.parametrize("causal", [True, False])
def test_sliding_window_weights_stay_in_the_band(causal: bool) -> None:
    att, n = sliding(window=3), 12
    x, mask = inputs(n, short=7)
    _, weights = att(x, x, x, mask, positions=Positions.self_attention(n, causal))
    i, j = torch.arange(n)[:, None], torch.arange(n)
    band = ((i - j).abs() < 3) & ((j <= i) | (not causal))
    real = (mask[:, None, :, None] & mask[:, None, None, :]).expand_as(weights)  # real query, real key
    assert (weights[real & ~band] == 0).all() and (weights[real & band] > 0).all()
    padded = (mask[:, None, :, None] & ~mask[:, None, None, :]).expand_as(weights)  # real query, padded key
    assert (weights[padded] == 0).all()
    sums = weights.sum(-1)[mask[:, None].expand(-1, H, -1)]
    torch.testing.assert_close(sums, torch.ones_like(sums))


@pytest.mark.parametrize("need_weights", [True, False])
def test_sliding_window_padded_queries_outside_every_real_window_keep_gradients_finite(
    need_weights: bool,
) -> None:
    """Padded queries more than w past the last real token see no real key; they attend to themselves."""
    att, n = sliding(window=1), 20
    x, mask = inputs(n, short=4)
    x = x.nan_to_num(0.0)
    for causal in (True, False):
        out, _ = att(x, x, x, mask, need_weights, positions=Positions.self_attention(n, causal))
        projection_loss(out).backward()
        assert all(torch.isfinite(p.grad).all() for p in att.parameters())


@pytest.mark.parametrize("score", ["scaled_dot", "alibi", "rope"])
def test_sliding_window_decodes_from_the_last_w_keys_as_the_full_pass(score: str) -> None:
    """w = 5 over 17 tokens in float64, padding included: the window wraps three times, and every step
    equals the banded pass (position scores see the window's own positions). The cache holds the last
    min(t + 1, w) keys and their positions, no more; a step returns the full row of weights until the
    window is full, and none after."""
    w, n = 5, 17
    att = perturbed(sliding(score, window=w))
    x, mask = padded(n, D)
    at = Positions.self_attention(n, causal=True)
    full, full_weights = att(x, x, x, mask, positions=at)
    steps, caches = decoded(att, x, mask)
    torch.testing.assert_close(steps[mask], full[mask])
    for t, cache in enumerate(caches[1:], 1):  # caches[0] is prepare's
        kept = min(t + 1, w)
        assert cache.position.tolist() == [list(range(t + 1 - kept, t + 1))] * 3
        assert shapes(cache.keys) == shapes(cache.values) == [(3, H, kept, D // H)]
    assert [att.state_size(k) for k in (1, w, w + 1, 10**6)] == [2 * D, *[2 * w * D] * 3]
    for t in (w - 2, n - 1):
        step = Positions(Positions.span(1, start=t), Positions.span(t + 1), causal=True)
        context, weights = att.attend_at(x[:, t : t + 1], caches[t], step)
        torch.testing.assert_close(context, steps[:, t : t + 1], equal_nan=True)  # NaN: padded queries
        if t < w - 1:
            real = mask[:, t]
            torch.testing.assert_close(weights[real], full_weights[real, :, t : t + 1, : t + 1])
        else:
            assert weights is None


def test_sliding_window_needs_positions_and_a_window() -> None:
    att = sliding()
    x = torch.randn(1, 4, D)
    with pytest.raises(ValueError, match="sliding_window needs positions"):
        att(x, x, x, torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="sliding_window needs window >= 1, got 0"):
        sliding(window=0)


# ---------------------------------------------------------------------------------------------
# `reference`: the plain equation each ships, which its fast paths must equal

LENGTHS = (1, 7, 31, 32, 33, 77, 130)  # one position; below, at and past one chunk of 32; several chunks
EVERY_QUERY = torch.ones(3, 3, dtype=torch.bool)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", LENGTHS)
def test_linear_equals_its_reference_in_self_attention(n: int, causal: bool, need_weights: bool) -> None:
    x, mask = padded(n, D)
    at = Positions.self_attention(n, causal)
    assert_matches_reference(perturbed(linear()), x, x, mask, need_weights, at, mask)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("at", ["none", "bidirectional", "causal"])
@pytest.mark.parametrize("n", LENGTHS)
def test_linear_equals_its_reference_in_cross_attention(n: int, at: str, need_weights: bool) -> None:
    """3 queries at positions 0..2 over n keys at 0..n-1 (causal: the explicit path's shape)."""
    keys, mask = padded(n, D)
    query = torch.randn(3, 3, D, dtype=torch.float64)
    positions = None if at == "none" else Positions(Positions.span(3), Positions.span(n), at == "causal")
    assert_matches_reference(perturbed(linear()), query, keys, mask, need_weights, positions, EVERY_QUERY)


@pytest.mark.parametrize("score", ["scaled_dot", "alibi"])
@pytest.mark.parametrize("window", [1, 3, 16])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", LENGTHS)
def test_sliding_window_equals_its_reference(
    n: int, causal: bool, need_weights: bool, window: int, score: str
) -> None:
    x, mask = padded(n, D)
    att = perturbed(sliding(score, window))
    assert_matches_reference(att, x, x, mask, need_weights, Positions.self_attention(n, causal), mask)


@pytest.mark.parametrize("causal", [True, False])
def test_sliding_window_reference_is_finite_for_padded_queries_without_a_real_key(causal: bool) -> None:
    att, n = perturbed(sliding(window=1)), 20
    x, mask = padded(n, D)
    out, weights = att.reference(x.nan_to_num(0.0), x, x, mask, positions=Positions.self_attention(n, causal))
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()


def test_sliding_window_reference_needs_positions() -> None:
    x = torch.randn(1, 4, D)
    with pytest.raises(ValueError, match="sliding_window needs positions"):
        sliding().reference(x, x, x, torch.ones(1, 4, dtype=torch.bool))


@pytest.mark.parametrize("need_weights", [True, False])
def test_a_linear_reference_that_sees_one_key_ahead_fails(need_weights: bool) -> None:
    class OneAhead(plugin("attention", "linear")):
        def reference(self, query, keys, values, mask, need_weights=True, positions=None):
            ahead = Positions(positions.query + 1, positions.key, positions.causal)
            return super().reference(query, keys, values, mask, need_weights, ahead)

    att, n = perturbed(OneAhead(D, D, D, num_heads=H)), 33
    x, mask = padded(n, D)
    with pytest.raises(AssertionError, match="not close"):
        assert_matches_reference(att, x, x, mask, need_weights, Positions.self_attention(n, True), mask)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("causal", [True, False])
def test_a_sliding_window_reference_one_wider_fails(causal: bool, need_weights: bool) -> None:
    cls = plugin("attention", "sliding_window")

    class OneWider(cls):
        def reference(self, *args, **kwargs):
            wider = copy.copy(self)  # the same parameters
            wider.window = self.window + 1
            return cls.reference(wider, *args, **kwargs)

    att, n = perturbed(OneWider(D, D, D, get("score", "scaled_dot"), num_heads=H, window=3)), 33
    x, mask = padded(n, D)
    with pytest.raises(AssertionError, match="not close"):
        assert_matches_reference(att, x, x, mask, need_weights, Positions.self_attention(n, causal), mask)


# a fast-path helper broken a little, by name: each reference must see it, since it shares none of them
BROKEN_HELPERS = {
    "_split": lambda split: lambda self, x: split(self, x).flip(1),  # the heads in reverse order
    "key_value_heads": lambda kv: lambda self, *args: tuple(t * 1.01 for t in kv(self, *args)),
    "_merge": lambda merge: lambda self, heads: merge(self, heads) * 1.01,
    "normalised": lambda normalised: lambda self, n, d: normalised(self, n, d) * 1.01,
    "phi": lambda phi: lambda self, x: phi(self, x) + 0.01,
}


@pytest.mark.parametrize(
    ("name", "helper"),
    [
        *(("linear", helper) for helper in BROKEN_HELPERS),
        ("sliding_window", "_split"),
        ("sliding_window", "_merge"),
    ],
)
def test_a_bug_in_a_fast_path_helper_fails_the_reference(name: str, helper: str) -> None:
    cls = plugin("attention", name)
    broken = type(f"Broken{helper}", (cls,), {helper: BROKEN_HELPERS[helper](getattr(cls, helper))})
    with pytest.raises(AssertionError, match=r"^reference .*forward differs from the plugin's reference"):
        check_attention(broken, checks=["reference"])


# ---------------------------------------------------------------------------------------------
# Both


class Shapes(TorchDispatchMode):
    """Records the shape of every tensor an operator returns, forward and backward."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.seen += [tuple(t.shape) for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        return out


def largest_square(att: Attention, n: int, causal: bool, need_weights: bool) -> int:
    """The largest min(last two dims) of any tensor made in a forward and backward over n positions."""
    x = torch.randn(1, n, D, requires_grad=True)
    mask = torch.ones(1, n, dtype=torch.bool)
    with Shapes() as shapes:
        out, _ = att(x, x, x, mask, need_weights, positions=Positions.self_attention(n, causal))
        out.sum().backward()
    return max(min(shape[-2:]) for shape in shapes.seen if len(shape) >= 2)


@pytest.mark.parametrize("make", [linear, sliding], ids=["linear", "sliding_window"])
@pytest.mark.parametrize("causal", [True, False])
def test_fast_paths_never_build_a_tq_by_tk_tensor(make: Callable[[], Attention], causal: bool) -> None:
    att = make()
    assert largest_square(att, 256, causal, need_weights=True) == 256  # the recorder sees the explicit path's
    assert largest_square(att, 4096, causal, need_weights=False) < 4096 // 2


@pytest.mark.slow  # the whole kit: `make test` runs it, `make test-fast` cannot afford it
@pytest.mark.parametrize(
    ("name", "score"), [("linear", None), ("sliding_window", None), ("sliding_window", "alibi")]
)
def test_pass_the_conformance_kit(name: str, score: str | None) -> None:
    if score is not None:
        plugin("score", score)
    ran = check_attention(plugin("attention", name), score)
    assert "causality" in ran and "cached_decoding" in ran and "padding" in ran


@pytest.mark.slow  # `attnx plugins check` in a subprocess: the kit over the whole registry
def test_listed_with_their_origin_and_checked_by_attnx_plugins() -> None:
    # the check in a process of its own: this one's registry may hold what other tests registered
    env = {**os.environ, "ATTNX_PLUGIN_PATH": ""}
    command = [sys.executable, "-m", "attnx.cli", "plugins", "check"]
    checked = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr
    out = checked.stdout
    assert "PASS  attention linear\n" in out and "PASS  attention sliding_window score=rope\n" in out
    load_all()
    rows = {cells[0]: cells[1:3] for cells in table_rows(describe())}
    assert rows["linear"] == [
        "dist attnx (attnx.contrib.linear)",
        "self_attention cross_attention causal takes_positions position_free incremental",
    ]
    assert rows["sliding_window"] == [
        "dist attnx (attnx.contrib.sliding_window)",
        "self_attention causal takes_positions incremental",
    ]


def table_rows(text: str) -> list[list[str]]:
    """The cells of every row of the markdown tables in `text`."""
    return [[c.strip() for c in line.split("|")[1:-1]] for line in text.splitlines() if line.startswith("|")]
