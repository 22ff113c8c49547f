"""Based (Arora et al. 2024), shipped in attnx.contrib.based: Zoology's Taylor feature map on linear
attention. φ is exp's second-order Taylor polynomial, the fast paths equal the polynomial kernel's explicit
matrix, decoding runs from the recurrent state, the kit holds it (and catches a wrong φ), and bad values are
one line (tests/e2e/plugins/test_based_cli.py trains it through the real CLI)."""

from __future__ import annotations

import math

import pytest
import torch
from hydra.core.config_store import ConfigStore

from attnx.contrib.based import BasedAttention, taylor_feature_map
from attnx.contrib.linear import LinearState
from attnx.nn.positions import Positions
from attnx.registry import build
from attnx.testing import check_attention

from helpers.stepwise import assert_matches_reference, decoded, padded, perturbed, shapes

D, H, F = 16, 2, 4  # width, heads, feature dimension: φ has 1 + 4 + 16 = 21 features per head


def based(**hyperparams: float) -> BasedAttention:
    """Based in float64 with noise on every parameter, so no initialisation's structure hides a difference."""
    return perturbed(BasedAttention(D, D, D, num_heads=H, feature_dim=F, **hyperparams))


def test_the_feature_map_is_exps_second_order_taylor_polynomial() -> None:
    q, k = torch.randn(2, 5, 7, F, dtype=torch.float64).unbind()
    s = q @ k.transpose(-1, -2) / math.sqrt(F)
    phi_q, phi_k = taylor_feature_map(q), taylor_feature_map(k)
    assert phi_q.shape == (5, 7, 1 + F + F * F)
    torch.testing.assert_close(phi_q @ phi_k.transpose(-1, -2), 1 + s + s**2 / 2)


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("n", [1, 33, 70])  # one token; past one chunk of 32; past two
def test_fast_paths_equal_the_explicit_polynomial_kernel(n: int, causal: bool, need_weights: bool) -> None:
    att = based()
    x, mask = padded(n, D)
    at = Positions.self_attention(n, causal)
    assert_matches_reference(att, x, x, mask, need_weights, at, mask)
    query = torch.randn(3, 2, D, dtype=torch.float64)  # cross-attention without positions: the shared state
    torch.testing.assert_close(att(query, x, x, mask)[0], att.reference(query, x, x, mask)[0])


def test_decodes_from_its_recurrent_state_as_the_full_causal_pass() -> None:
    """Token by token in float64 up to t = 70: every step equals the chunked causal pass, and from the step
    where the state is the smaller cache (n·(21 + 8) > 21·9: n = 7) the cache is S' alone, one
    [B, H, 1 + f + f², d + 1] tensor at every later step, as `state_size` declares."""
    att, n, d = based(), 71, D // H
    x, mask = padded(n, D)
    full, _ = att(x, x, x, mask, need_weights=False, positions=Positions.self_attention(n, causal=True))
    steps, caches = decoded(att, x, mask)
    torch.testing.assert_close(steps[mask], full[mask])
    features = 1 + F + F * F
    assert not isinstance(caches[5], LinearState)
    assert all(isinstance(c, LinearState) and shapes(c) == [(3, H, features, d + 1)] for c in caches[6:])
    assert att.state_size(7) == att.state_size(10**6) == H * features * (d + 1)


@pytest.mark.slow  # the whole kit: `make test` runs it, `make test-fast` cannot afford it
def test_passes_the_kit_which_catches_a_feature_map_without_its_root_two() -> None:
    ran = check_attention(BasedAttention)
    assert {"cached_decoding", "state", "reference", "precision"} <= set(ran)

    class NoRootTwo(BasedAttention):  # φ·φ = 1 + s + s²: the fast paths drift from exp's polynomial
        def phi(self, x: torch.Tensor) -> torch.Tensor:
            squares = taylor_feature_map(x)[..., 1 + x.size(-1) :]
            return torch.cat([taylor_feature_map(x)[..., : 1 + x.size(-1)], squares * math.sqrt(2)], -1)

    with pytest.raises(
        AssertionError, match=r"reference \([^)]*\): .*forward differs from the plugin's reference"
    ):
        check_attention(NoRootTwo, checks=["reference"])


def test_zoologys_defaults_and_one_line_for_a_bad_value() -> None:
    config = ConfigStore.instance().repo["attention"]["based.yaml"].node  # what `attention=based` composes
    assert dict(config) == {"name": "based", "feature_dim": 16, "num_heads": 1, "eps": 1e-12}
    att = build("attention", config, query_dim=64, key_dim=64, value_dim=64)
    assert att.W_q.out_features == att.W_k.out_features == 16 and att.W_v.out_features == 64
    with pytest.raises(ValueError, match=r"^based needs feature_dim >= 1, got feature_dim=0$"):
        BasedAttention(D, D, D, feature_dim=0)
    with pytest.raises(ValueError, match=r"^based needs eps >= 0, got eps=-1.0$"):
        BasedAttention(D, D, D, eps=-1.0)


def test_a_short_sequence_is_one_block_of_products_equal_to_the_chunked_prefix_sum() -> None:
    from attnx.contrib.linear import causal_linear

    phi_q, phi_k = torch.rand(2, 2, 2, 40, 4, dtype=torch.float64).unbind()
    v = torch.randn(2, 2, 40, 3, dtype=torch.float64)
    # F = 4, d + 1 = 4: 40 queries cost 40·8 > 8·8 + 2·16 in chunks of 8 (chunked), <= 64·8 + 32 in 64s
    chunked, whole = causal_linear(phi_q, phi_k, v, 8), causal_linear(phi_q, phi_k, v, 64)
    ones = torch.cat([v, torch.ones_like(v[..., :1])], -1)
    torch.testing.assert_close(whole, (phi_q @ phi_k.transpose(-1, -2)).tril() @ ones)
    torch.testing.assert_close(chunked, whole)
