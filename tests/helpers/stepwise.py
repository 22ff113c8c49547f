"""Decoding a mechanism token by token as a causal self-attention site does (`prepare` the first token,
`extend` by each next one, one query at position t over keys 0..t), for the sub-quadratic plugins' tests."""

from __future__ import annotations

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
