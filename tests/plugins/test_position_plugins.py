"""The relative position scores shipped in attnx.contrib: ALiBi, T5's bias and RoPE. Their defining
properties (slopes, buckets, rotations), relative positions only, their place in multi-head and
single-head attention under a causal mask, a decoder's key cache, and one tiny `attnx train` each."""

from __future__ import annotations

import math
import sys
from types import ModuleType

import pytest
import torch

from attnx.config.compose import compose
from attnx.nn.attention import Mechanism
from attnx.nn.classic import LuongAttention
from attnx.nn.decoders import TransformerDecoder
from attnx.nn.encoders import EncoderOutput
from attnx.nn.multihead import MultiHeadAttention
from attnx.nn.positions import Positions
from attnx.nn.scores import Score
from attnx.registry import get, load_all
from attnx.testing import check_score_shapes, projection_loss

from helpers.plugins import NAMES

B, H, T, D = 3, 4, 6, 16  # batch, heads, length, d_model (head dim 4)
LENGTHS = (6, 4, 1)


def score_class(name: str) -> type[Score]:
    load_all()  # the shipped plugins, through attnx's own entry points
    return get("score", name)


def plugin(name: str) -> ModuleType:
    """The plugin file's module, for its helper functions."""
    return sys.modules[score_class(name).__module__]


def build(name: str, dim: int = 4, heads: int = H) -> Score:
    """A score for `heads` heads; T5's table random, so that its bias is not zero."""
    cls = score_class(name)
    score = cls(dim, dim, num_heads=heads) if name != "rope" else cls(dim, dim)
    if name == "t5_bias":
        torch.nn.init.normal_(score.bias.weight)
    return score.double()


def scores(score: Score, q: torch.Tensor, k: torch.Tensor, positions: Positions) -> torch.Tensor:
    return score(q, score.prepare(k), positions)


def test_alibi_slopes_for_a_power_of_two_heads_are_2_to_the_minus_8h_over_h() -> None:
    slopes = plugin("alibi").alibi_slopes
    assert slopes(8).tolist() == [1 / 2**h for h in range(1, 9)]
    assert slopes(2).tolist() == [1 / 16, 1 / 256]
    assert slopes(1).tolist() == [1 / 256]


def test_alibi_slopes_for_other_heads_follow_the_paper() -> None:
    slopes = plugin("alibi").alibi_slopes
    # H = 6: the 4 slopes of H = 4, then every other slope of H = 8 (1/2, 1/8)
    assert slopes(6).tolist() == [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]
    expected = [2**-h for h in range(1, 9)] + [2 ** (-h / 2) for h in (1, 3, 5, 7)]
    assert torch.allclose(slopes(12), torch.tensor(expected))


def test_alibi_is_scaled_dot_minus_slope_times_distance_per_head() -> None:
    score = build("alibi")
    q, k = torch.randn(2, H, T, 4, dtype=torch.float64), torch.randn(2, H, T, 4, dtype=torch.float64)
    got = scores(score, q, k, Positions.self_attention(T, causal=False))
    distance = (torch.arange(T)[None] - torch.arange(T)[:, None]).abs()
    slopes = torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8], dtype=torch.float64)
    expected = q @ k.transpose(-1, -2) / 2 - slopes[:, None, None] * distance
    assert torch.allclose(got, expected)


def test_alibi_has_no_parameters() -> None:
    assert list(build("alibi").parameters()) == []


def test_t5_buckets_match_hand_computed_values() -> None:
    bucket = plugin("t5_bias").relative_position_bucket
    r = torch.tensor([0, -1, -7, -8, -15, -16, -127, -128, -1000, 1, 7, 8, 16, 1000])
    # bidirectional, 32 buckets: 16 per sign, 8 exact; r = -16 is 8 + ⌊8·log(16/8)/log(128/8)⌋ = 10
    assert bucket(r, True).tolist() == [0, 1, 7, 8, 9, 10, 15, 15, 15, 17, 23, 24, 26, 31]
    # causal: every bucket for r ≤ 0, 16 exact; r = -32 is 16 + ⌊16·log(32/16)/log(128/16)⌋ = 21
    r = torch.tensor([3, 0, -1, -15, -16, -32, -127, -128, -1000])
    assert bucket(r, False).tolist() == [0, 0, 1, 15, 16, 21, 31, 31, 31]
    # smaller tables: 8 buckets up to distance 20, 2 exact per sign; r = -3 is 2 + ⌊2·log(3/2)/log(10)⌋ = 2
    r = torch.tensor([-1, -2, -3, -19, -20, -50, 2, 50])
    assert bucket(r, True, num_buckets=8, max_distance=20).tolist() == [1, 2, 2, 3, 3, 3, 6, 7]


def test_t5_bias_adds_the_bucket_of_each_head() -> None:
    score = build("t5_bias")
    q, k = torch.randn(1, H, T, 4, dtype=torch.float64), torch.randn(1, H, T, 4, dtype=torch.float64)
    positions = Positions.self_attention(T, causal=True)
    bias = scores(score, q, k, positions) - q @ k.transpose(-1, -2) / 2
    table = score.bias.weight  # [buckets, heads]
    assert torch.allclose(bias[0, :, 5, 2], table[3])  # r = -3: exact bucket 3 of the causal buckets
    assert torch.allclose(bias[0, :, 2, 5], table[0])  # r > 0 (masked) shares bucket 0 under causal
    bidirectional = (
        scores(score, q, k, Positions.self_attention(T, causal=False)) - q @ k.transpose(-1, -2) / 2
    )
    assert torch.allclose(bidirectional[0, :, 2, 5], table[19])  # r = +3: 16 + 3


def test_t5_unscaled_drops_the_square_root() -> None:
    scaled, unscaled = build("t5_bias"), score_class("t5_bias")(4, 4, num_heads=H, scaled=False).double()
    unscaled.load_state_dict(scaled.state_dict())
    q, k = torch.randn(1, H, T, 4, dtype=torch.float64), torch.randn(1, H, T, 4, dtype=torch.float64)
    positions = Positions.self_attention(T, causal=False)
    bias = scores(scaled, q, k, positions) - q @ k.transpose(-1, -2) / 2
    assert torch.allclose(scores(unscaled, q, k, positions), q @ k.transpose(-1, -2) + bias)


def test_t5_table_starts_at_zero_and_gets_a_gradient() -> None:
    attention = MultiHeadAttention(D, D, D, score_class("t5_bias"), num_heads=H)
    assert (attention.score.bias.weight == 0).all()
    x = torch.randn(B, T, D)
    context, _ = attention(
        x, x, x, torch.ones(B, T, dtype=torch.bool), positions=Positions.self_attention(T, True)
    )
    projection_loss(context).backward()
    grad = attention.score.bias.weight.grad
    assert grad is not None and grad.shape == (32, H) and (grad != 0).any()


def test_t5_refuses_a_max_distance_inside_the_exact_range() -> None:
    with pytest.raises(ValueError, match="max_distance > num_buckets / 2"):
        score_class("t5_bias")(4, 4, num_buckets=32, max_distance=16)


def test_rope_rotation_preserves_norms() -> None:
    rotate = plugin("rope").rotate
    x = torch.randn(2, H, T, 8, dtype=torch.float64)
    position = torch.tensor([[0, 1, 5, 17, 300, 4096]])
    rotated = rotate(x, position, 10000.0)
    assert torch.allclose(rotated.norm(dim=-1), x.norm(dim=-1))
    assert torch.equal(rotated[..., 0, :], x[..., 0, :])  # position 0: no rotation
    assert not torch.allclose(rotated[..., 1:, :], x[..., 1:, :])


def test_rope_rotates_pairs_by_position_times_theta() -> None:
    rotate = plugin("rope").rotate
    x = torch.tensor([[[1.0, 0.0, 1.0, 0.0]]], dtype=torch.float64)  # [1, 1, 4]: pairs (1, 0), (1, 0)
    rotated = rotate(x, torch.tensor([[3]]), 100.0)  # θ = 1, 100^(-1/2) = 0.1
    expected = [math.cos(3), math.sin(3), math.cos(0.3), math.sin(0.3)]
    assert torch.allclose(rotated[0, 0], torch.tensor(expected, dtype=torch.float64))


def test_rope_score_depends_only_on_the_relative_position() -> None:
    score = build("rope", dim=8)
    q, k = torch.randn(1, 1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 1, 8, dtype=torch.float64)

    def at(i: int, j: int) -> float:
        return scores(score, q, k, Positions(torch.tensor([[i]]), torch.tensor([[j]]))).item()

    assert at(2, 5) == pytest.approx(at(102, 105)) == pytest.approx(at(0, 3))
    assert at(7, 3) == pytest.approx(at(4, 0))
    assert at(2, 5) != pytest.approx(at(2, 6))
    assert at(0, 0) == pytest.approx((q * k).sum().item() / math.sqrt(8))


@pytest.mark.parametrize("dims", [(5, 5), (6, 8)])
def test_rope_refuses_odd_or_unequal_dims(dims: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="rope needs an even d and query_dim == key_dim"):
        score_class("rope")(*dims)


@pytest.mark.parametrize("name", NAMES)
def test_scores_are_invariant_to_shifting_every_position(name: str) -> None:
    score = build(name)
    q, k = torch.randn(2, H, T, 4, dtype=torch.float64), torch.randn(2, H, T, 4, dtype=torch.float64)
    for causal in (False, True):
        base = scores(score, q, k, Positions.self_attention(T, causal))
        shifted = Positions(Positions.span(T, start=37), Positions.span(T, start=37), causal)
        assert torch.allclose(scores(score, q, k, shifted), base)
        # and the positions do matter: keys moved by one change the scores
        moved = Positions(Positions.span(T), Positions.span(T, start=1), causal)
        assert not torch.allclose(scores(score, q, k, moved), base)


@pytest.mark.parametrize("name", NAMES)
def test_per_sequence_positions_equal_shared_ones(name: str) -> None:
    score = build(name)
    q, k = torch.randn(B, H, 1, 4, dtype=torch.float64), torch.randn(B, H, T, 4, dtype=torch.float64)
    starts = (0, 3, 11)
    per_sequence = Positions(
        torch.tensor([[s + T - 1] for s in starts]),
        torch.stack([Positions.span(T, start=s)[0] for s in starts]),
        True,
    )
    together = scores(score, q, k, per_sequence)
    for b, s in enumerate(starts):
        alone = Positions(Positions.span(1, start=s + T - 1), Positions.span(T, start=s), True)
        assert torch.allclose(together[b], scores(score, q[b : b + 1], k[b : b + 1], alone)[0])


@pytest.mark.parametrize("name", NAMES)
def test_passes_the_kits_shape_check(name: str) -> None:
    check_score_shapes(score_class(name))


def mechanism(kind: str, name: str) -> torch.nn.Module:
    if kind == "multi_head":
        return MultiHeadAttention(D, D, D, score_class(name), num_heads=H).double().eval()
    return LuongAttention(D, D, D, score_class(name)).double().eval()


@pytest.mark.parametrize("kind", ["multi_head", "dot"])
@pytest.mark.parametrize("name", NAMES)
def test_causal_attention_masks_the_future_and_the_padding(name: str, kind: str) -> None:
    attention = mechanism(kind, name)
    x = torch.randn(B, T, D, dtype=torch.float64)
    mask = torch.arange(T) < torch.tensor(LENGTHS)[:, None]
    positions = Positions.self_attention(T, causal=True)
    context, weights = attention(x, x, x, mask, positions=positions)
    assert weights.shape == ((B, H, T, T) if kind == "multi_head" else (B, T, T))
    assert torch.isfinite(context).all() and torch.isfinite(weights).all()
    assert torch.allclose(weights.sum(-1), torch.ones(()).double())
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    assert (weights[..., future] == 0).all()
    padded = ~mask.view(B, *[1] * (weights.dim() - 2), T).expand_as(weights)
    assert (weights[padded] == 0).all()
    # garbage in the padded keys changes nothing in the real positions
    garbage = x.masked_fill(~mask[..., None], 1e4)
    again, _ = attention(x, garbage, garbage, mask, positions=positions)
    real = mask[..., None].expand_as(context)
    assert torch.allclose(again[real], context[real])


@pytest.mark.parametrize("kind", ["multi_head", "dot"])
@pytest.mark.parametrize("name", NAMES)
def test_a_decoding_step_equals_the_last_row_of_the_whole_sequence(name: str, kind: str) -> None:
    attention = mechanism(kind, name)
    x = torch.randn(B, T, D, dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.bool)
    whole, _ = attention(x, x, x, mask, positions=Positions.self_attention(T, causal=True))
    for t in range(T):
        keys = attention.prepare(x[:, : t + 1], x[:, : t + 1], mask[:, : t + 1])
        step = Positions(Positions.span(1, start=t), Positions.span(t + 1), causal=True)
        context, _ = attention.attend_at(x[:, t : t + 1], keys, step)
        assert torch.allclose(context[:, 0], whole[:, t]), t


@pytest.mark.parametrize("name", NAMES)
def test_transformer_decoder_with_a_key_cache_equals_teacher_forcing(name: str) -> None:
    """Every site of a decoder uses the score: its cached self-attention keys must stay valid."""
    cls = score_class(name)
    heads = {"num_heads": 2}
    decoder = TransformerDecoder(
        vocab_size=12,
        enc_dim=D,
        cross_attention=Mechanism(MultiHeadAttention, cls, heads),
        attention=Mechanism(MultiHeadAttention, cls, heads),
        d_model=D,
        num_layers=2,
        ff_dim=32,
        positions="none",
    ).eval()
    if name == "t5_bias":
        for block in decoder.blocks:
            torch.nn.init.normal_(block.self_attention.mechanism.score.bias.weight)
    states = torch.randn(2, 7, D)
    enc = EncoderOutput(states, states.mean(1), torch.arange(7) < torch.tensor([[7], [5]]))
    tokens = torch.randint(4, 12, (2, 5))
    with torch.no_grad():
        forced, _ = decoder(enc, tokens)
        state, stepped = decoder.init_state(enc), []
        for t in range(tokens.size(1)):
            logits, state, _ = decoder.step(tokens[:, t], state)
            stepped.append(logits)
    assert torch.allclose(torch.stack(stepped, 1), forced, atol=1e-5)


@pytest.mark.parametrize("option", ["sinusoidal", "learned", *NAMES])
def test_each_option_of_the_positions_experiment_switches_every_site(option: str) -> None:
    for name in NAMES:
        score_class(name)  # registered: their configs are in Hydra's ConfigStore
    cfg = compose(["experiment=positions", f"positions={option}"])
    relative = option in NAMES
    assert cfg.encoder.positions == cfg.decoder.positions == ("none" if relative else option)
    chosen = [None if s is None else s.name for s in (cfg.encoder.score, cfg.decoder.score, cfg.score)]
    assert chosen == [option if relative else None] * 3  # None: multi_head's scaled_dot
    assert (cfg.encoder.name, cfg.decoder.name, cfg.attention.name) == (
        "self_attn",
        "transformer",
        "multi_head",
    )
    assert cfg.task.max_len < cfg.task.test_min_len  # a length-generalisation split
