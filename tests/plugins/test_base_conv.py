"""BaseConv (Zoology), shipped in attnx.contrib.base_conv: Zoology's gated convolution y = (W u + b) ⊙ conv(u)
+ u with a short filter (nn.Conv1d's) or a long one (its input added, as Zoology's fft_conv does). The FFT
path equals Zoology's convolutions written with torch's own ops, decoding keeps the last L inputs as it
declares, the kit holds both filters, and values that would change nothing are refused by name."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attnx.contrib.base_conv import BaseConv, Recent, positional_features
from attnx.nn.positions import Positions
from attnx.testing import check_attention

from helpers.stepwise import decoded, padded, perturbed, shapes

D = 6


def base_conv(**hyperparams: object) -> BaseConv:
    return perturbed(BaseConv(D, D, D, **hyperparams))  # type: ignore[arg-type]


def zoology(att: BaseConv, u: torch.Tensor) -> torch.Tensor:
    """Zoology's BaseConv.forward on u [B, T, D], its convolutions by torch's ops: nn.Conv1d padded k − 1 and
    cut (ShortConvolution), or u convolved with the whole filter plus u (fft_conv), causal by construction."""
    t = u.size(1)
    if att.kernel_size is not None:
        conv = F.conv1d(
            u.transpose(1, 2), att.conv.weight, att.conv.bias, padding=att.kernel_size - 1, groups=D
        )
        conv = conv[..., :t].transpose(1, 2)
    else:
        k = att.filter[:, :t]  # tap d multiplies u_{i−d}: conv1d correlates, so flip it
        past = F.pad(u.transpose(1, 2), (k.size(1) - 1, 0))
        conv = F.conv1d(past, k.flip(-1)[:, None], groups=D).transpose(1, 2)
        conv = conv + u
    return att.projection(u) * conv + u


@pytest.mark.parametrize("hyperparams", [{"kernel_size": 3}, {"implicit_long_conv": False, "l_max": 40}])
@pytest.mark.parametrize("n", [1, 9, 50])  # one token; shorter than the long filter; longer
def test_forward_is_zoologys_base_conv_and_its_reference(n: int, hyperparams: dict[str, object]) -> None:
    att = base_conv(**hyperparams)
    x, mask = padded(n, D)
    at = Positions.self_attention(n, causal=True)
    out, _ = att(x, x, x, mask, need_weights=False, positions=at)
    explicit, weights = att(x, x, x, mask, need_weights=True, positions=at)
    expected, expected_weights = att.reference(x, x, x, mask, positions=at)
    for got in (explicit, expected, zoology(att, x.nan_to_num(0.0))):
        torch.testing.assert_close(out[mask], got[mask])
    torch.testing.assert_close(weights, expected_weights)
    assert weights is not None and weights.shape == (3, D, n, n)
    assert (weights.triu(1) == 0).all() and (weights[1, :, :, n // 2 + 1 :] == 0).all()  # causal, masked


def test_the_implicit_filter_is_an_mlp_over_zoologys_positional_features() -> None:
    att = base_conv()  # kernel_size null: the implicit long filter
    z = positional_features(5, 1024, torch.zeros((), dtype=torch.float64))
    torch.testing.assert_close(
        z[:2],
        torch.tensor(
            [[0, 1, 0], [1 / 1023, math.cos(2e-4 * math.pi / 1024), -math.sin(2e-4 * math.pi / 1024)]],
            dtype=torch.float64,
        ),
    )
    h = att.mlp(z).T
    torch.testing.assert_close(att.taps(5), h + F.one_hot(torch.tensor(0), 5))


@pytest.mark.parametrize(
    ("hyperparams", "length"), [({"kernel_size": 3}, 3), ({"l_max": 12}, 12), ({}, 1024)]
)
def test_decoding_keeps_the_last_l_inputs_and_equals_the_full_pass(hyperparams: dict, length: int) -> None:
    att, n = base_conv(**hyperparams), 30
    x, mask = padded(n, D)
    full, _ = att(x, x, x, mask, need_weights=False, positions=Positions.self_attention(n, causal=True))
    steps, caches = decoded(att, x, mask)
    torch.testing.assert_close(steps[mask], full[mask])
    for t, cache in enumerate(caches[1:], start=2):
        held = min(t, length)
        assert isinstance(cache, Recent) and shapes(cache) == [(3, held, D), (3, held)]
        assert att.state_size(t) == held * D
    assert att.state_size(10**6) == length * D  # the short filter's k·D; the long one's stops at l_max·D


@pytest.mark.slow  # the whole kit: `make test` runs it, `make test-fast` cannot afford it
@pytest.mark.parametrize("hyperparams", [{}, {"kernel_size": 3, "use_act": True}])
def test_passes_the_kit(hyperparams: dict[str, object]) -> None:
    assert {"reference", "cached_decoding", "state", "weights_used", "hyperparameters"} <= set(
        check_attention(BaseConv, **hyperparams)
    )


def test_a_bad_value_is_one_line_naming_it() -> None:
    with pytest.raises(ValueError, match=r"^base_conv needs kernel_size >= 1 .* got kernel_size=0$"):
        BaseConv(D, D, D, kernel_size=0)
    with pytest.raises(ValueError, match=r"^base_conv needs l_max >= 1, got l_max=0$"):
        BaseConv(D, D, D, l_max=0)
    with pytest.raises(ValueError, match=r"kernel_size=3 with l_max=64, implicit_long_conv=True$"):
        BaseConv(D, D, D, kernel_size=3, l_max=64)
    with pytest.raises(ValueError, match=r"needs query_dim == value_dim, got query_dim=6, value_dim=4$"):
        BaseConv(D, D, 4)
