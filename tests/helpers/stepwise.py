"""For the sub-quadratic plugins' tests: noisy float64 mechanisms, padded inputs, and decoding a mechanism
token by token as a causal self-attention site does (`prepare` the first token, `extend` by each next one,
one query at position t over keys 0..t)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from attnx.nn.attention import Attention
from attnx.nn.positions import Positions


def decoded(att: Attention, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, list[Any]]:
    """(each step's context [B, T, D], the cache after each step) for x [B, T, D] with key mask [B, T]."""
    prepared, contexts, caches = None, [], []
    for t in range(x.size(1)):
        token, real = x[:, t : t + 1], mask[:, t : t + 1]
        prepared = (
            att.prepare(token, token, real) if prepared is None else att.extend(prepared, token, token, real)
        )
        at = Positions(Positions.span(1, start=t), Positions.span(t + 1), causal=True)
        contexts.append(att.attend_at(token, prepared, at, need_weights=False)[0])
        caches.append(prepared)
    return torch.cat(contexts, 1), caches


def shapes(cache: Any) -> list[tuple[int, ...]]:
    """The shapes of the tensors a cache holds."""
    return [tuple(t.shape) for t in tree_leaves(cache) if isinstance(t, torch.Tensor)]


def perturbed(att: Attention) -> Attention:
    """att in float64 with noise on every parameter, so that no initialisation's structure hides a
    difference, in train mode (its dropout p is 0)."""
    att = att.double().train()
    with torch.no_grad():
        for p in att.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return att


def padded(n: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x [3, n, width] in float64 and its key mask: sequences of n, n // 2 + 1 and 1 tokens, NaN in
    padding."""
    mask = torch.arange(n) < torch.tensor([n, n // 2 + 1, 1])[:, None]
    return torch.randn(3, n, width, dtype=torch.float64).masked_fill(~mask[..., None], math.nan), mask


def assert_matches_reference(
    att: Attention,
    query: torch.Tensor,
    keys: torch.Tensor,
    mask: torch.Tensor,
    need_weights: bool,
    positions: Positions | None,
    real: torch.Tensor,
) -> None:
    """forward == reference (context, and weights when asked for) over the `real` queries' rows [B, Tq], to
    float64 precision; NaN in those rows fails."""
    out, weights = att(query, keys, keys, mask, need_weights, positions)
    expected, expected_weights = att.reference(query, keys, keys, mask, need_weights, positions)
    torch.testing.assert_close(out[real], expected[real])
    if need_weights:
        rows = real[:, None].expand(-1, att.num_heads, -1)
        torch.testing.assert_close(weights[rows], expected_weights[rows])
    else:
        assert weights is None and expected_weights is None
