"""A causal site's `KVCache`: an incremental mechanism's cache is its own state alone (no inputs kept, so a
state that stops growing decodes in constant memory); a mechanism that re-prepares keeps its inputs; both
reorder for beam search and hold what `KVCache.state_size` says."""

import torch

from attnx.nn.attention import Mechanism, stored
from attnx.nn.classic import LuongAttention
from attnx.nn.multihead import MultiHeadAttention
from attnx.nn.positions import Positions
from attnx.nn.transformer import AttentionSite, KVCache

D, B, T = 8, 3, 6


def decoded(site: AttentionSite, x: torch.Tensor) -> list[KVCache]:
    """The cache after each token of x [B, T, D], fed one at a time as a decoder does."""
    caches, cache = [], None
    for t in range(x.size(1)):
        cache = site.cache(x[:, t : t + 1].clone(), torch.ones(x.size(0), 1, dtype=torch.bool), cache)
        caches.append(cache)
    return caches


def test_an_incremental_cache_keeps_no_inputs_and_holds_its_declared_state() -> None:
    site = AttentionSite(Mechanism(MultiHeadAttention, None, {"num_heads": 2}), D, "causal")
    for n, cache in enumerate(decoded(site, torch.randn(B, T, D)), 1):
        assert cache.inputs is None and cache.mask is None
        assert stored(cache) == B * KVCache.state_size(site.mechanism, n) == B * 2 * n * D


def test_a_re_preparing_cache_keeps_its_inputs_and_counts_them() -> None:
    site = AttentionSite(Mechanism(LuongAttention, None, {}), D, "causal")
    x = torch.randn(B, T, D)
    cache = decoded(site, x)[-1]
    assert cache.inputs is not None and torch.equal(cache.inputs, x)
    # the dot score's prepared keys are the inputs themselves; the masked values are its state
    assert KVCache.state_size(site.mechanism, T) == site.mechanism.state_size(T) + T * D == 2 * T * D
    assert stored(cache) == B * 2 * T * D


def test_select_reorders_a_cache_without_inputs_and_the_step_follows() -> None:
    site = AttentionSite(Mechanism(MultiHeadAttention, None, {"num_heads": 2}), D, "causal").eval()
    x = torch.randn(B, T, D)
    cache = decoded(site, x)[-1]
    index = torch.tensor([2, 0, 0])
    moved = cache.select(index)
    assert moved.inputs is None and moved.mask is None
    at = Positions(Positions.span(1, start=T - 1), Positions.span(T), True)
    step = site(x[index, -1:], moved.prepared, at, False)[0]
    torch.testing.assert_close(step, site(x[:, -1:], cache.prepared, at, False)[0][index])
