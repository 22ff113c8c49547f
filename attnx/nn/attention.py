"""Attention mechanisms: how a model turns scores into a context vector, and where it uses it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn

from attnx.nn.scores import Score
from attnx.registry import register_attention

ScoreFactory = Callable[[int, int], Score]  # (query_dim, key_dim) -> Score


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax over the last dim restricted to `mask` (True = real key): masked keys get exactly 0.

    scores [..., Tq, Tk], mask broadcastable to [..., 1, Tk]. Every row must have one real key.
    """
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


class Attention(nn.Module):
    """Base class of the `attention` kind.

    `placement` tells a decoder where the mechanism acts (DESIGN.md):
      "none"    no context (Sutskever 2014); "fixed_c" one code C at every step (Cho 2014);
      "before"  context from s_{i-1}, fed into the RNN step (Bahdanau 2015);
      "after"   RNN step first, query h_t, attentional state tanh(W_c[c_t; h_t]) (Luong 2015).
    `default_score` is the score used when the user picks none; None means the mechanism takes
    no score and a user-supplied one is an error.
    """

    placement: ClassVar[str] = "after"
    default_score: ClassVar[str | None] = "dot"

    def __init__(self, query_dim: int, key_dim: int, value_dim: int, score: ScoreFactory | None) -> None:
        super().__init__()
        self.query_dim = query_dim
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.output_dim = value_dim  # dim of the returned context; subclasses may change it

    def memory(self, states: torch.Tensor, summary: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What the mechanism attends to, from an encoder's output: (keys, values, mask)."""
        return states, states, mask

    def prepare(self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> Any:
        """Per-sequence work on keys/values, done once before a decoder's time loop."""
        raise NotImplementedError

    def attend(self, query: torch.Tensor, prepared: Any, need_weights: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """query [B, Tq, Dq] -> (context [B, Tq, output_dim], weights [B, (H,) Tq, Tk] or None)."""
        raise NotImplementedError

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.attend(query, self.prepare(keys, values, mask), need_weights)
