"""Decayed linear attention, shipped in attnx.contrib.retnet (RetNet's fixed decay γ_h = 1 − 2^(−5−h)) and
attnx.contrib.gla (GLA's gate α_t = σ(x_t W_α)^(1/τ)): the chunked form equals the recurrence past several
chunks, the weights are Q Kᵀ ⊙ D with RetNet's D_ij = γ^(i−j), decoding ends in a constant state, the kit
holds both, and bad values are one line."""

from __future__ import annotations

import math

import pytest
import torch

from attnx.contrib.gla import GatedLinearAttention
from attnx.contrib.retnet import DecayedLinearAttention, DecayState, Retention
from attnx.nn.positions import Positions
from attnx.testing import check_attention

from helpers.stepwise import decoded, padded, perturbed, shapes

D, H = 8, 2
d = D // H


def mechanism(cls: type[DecayedLinearAttention]) -> DecayedLinearAttention:
    return perturbed(cls(D, D, D, num_heads=H))


@pytest.mark.parametrize("cls", [Retention, GatedLinearAttention])
@pytest.mark.parametrize("n", [1, 17, 40])  # one token; past one chunk of 16; into a third
def test_the_chunked_form_is_the_recurrence(cls: type[DecayedLinearAttention], n: int) -> None:
    att = mechanism(cls)
    x, mask = padded(n, D)
    at = Positions.self_attention(n, causal=True)
    expected, expected_weights = att.reference(x, x, x, mask, positions=at)
    for need_weights in (False, True):
        out, weights = att(x, x, x, mask, need_weights, at)
        torch.testing.assert_close(out[mask], expected[mask])
    rows = mask[:, None].expand(-1, H, -1)
    torch.testing.assert_close(weights[rows], expected_weights[rows])


def test_retentions_weights_are_q_k_times_gamma_to_the_distance() -> None:
    att, n = mechanism(Retention), 6
    x = torch.randn(1, n, D, dtype=torch.float64)
    _, weights = att(x, x, x, torch.ones(1, n, dtype=torch.bool), True, Positions.self_attention(n, True))
    q = (x @ att.W_q.weight.T).view(1, n, H, d).transpose(1, 2) / math.sqrt(d)
    k = (x @ att.W_k.weight.T).view(1, n, H, d).transpose(1, 2)
    gamma = 1 - 2.0 ** (-5 - torch.arange(H, dtype=torch.float64))
    i, j = torch.arange(n)[:, None], torch.arange(n)
    decay = torch.where(j <= i, gamma[:, None, None] ** (i - j).clamp(min=0), 0)
    torch.testing.assert_close(weights, q @ k.transpose(-1, -2) * decay, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("cls", [Retention, GatedLinearAttention])
def test_decodes_from_a_constant_state_as_the_full_pass(cls: type[DecayedLinearAttention]) -> None:
    att, n = mechanism(cls), 40
    x, mask = padded(n, D)
    full, _ = att(x, x, x, mask, need_weights=False, positions=Positions.self_attention(n, causal=True))
    steps, caches = decoded(att, x, mask)
    torch.testing.assert_close(steps[mask], full[mask])
    assert all(isinstance(c, DecayState) and shapes(c) == [(3, H, d, d)] for c in caches[1:])
    assert att.state_size(2) == att.state_size(10**6) == H * d * d


@pytest.mark.slow  # the whole kit: `make test` runs it, `make test-fast` cannot afford it
@pytest.mark.parametrize("cls", [Retention, GatedLinearAttention])
def test_passes_the_kit(cls: type[DecayedLinearAttention]) -> None:
    assert {"reference", "cached_decoding", "state", "weights_used", "hyperparameters"} <= set(
        check_attention(cls)
    )


def test_a_bad_value_is_one_line_naming_it() -> None:
    with pytest.raises(ValueError, match=r"^gla needs gate_low_rank_dim >= 1, got gate_low_rank_dim=0$"):
        GatedLinearAttention(D, D, D, gate_low_rank_dim=0)
    with pytest.raises(
        ValueError, match=r"^gla needs gate_logit_normalizer > 0, got gate_logit_normalizer=0.0$"
    ):
        GatedLinearAttention(D, D, D, gate_logit_normalizer=0.0)
    with pytest.raises(ValueError, match=r"needs num_heads to divide query_dim, got num_heads=3"):
        Retention(D, D, D, num_heads=3)
