"""Score functions f(q, k): raw relevance of every key to every query (no softmax, no mask)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from attnx.registry import register_score


class Score(nn.Module):
    """Base class of the `score` kind.

    `prepare(keys)` does the per-sequence key work once (e.g. U·k for additive scoring) so a
    decoder can call `forward` at every step without repeating it. Shapes are batch-first with
    any leading dims: query [..., Tq, Dq], keys [..., Tk, Dk] -> scores [..., Tq, Tk].
    """

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        self.query_dim = query_dim
        self.key_dim = key_dim

    def prepare(self, keys: torch.Tensor) -> Any:
        return keys

    def forward(self, query: torch.Tensor, prepared: Any) -> torch.Tensor:
        raise NotImplementedError
