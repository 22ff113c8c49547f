"""Positions: where queries and keys sit in their sequences, and the absolute encodings of a layer.

Relative methods (ALiBi, T5 biases, rotary embeddings) read `Positions` inside a score; absolute ones
(sinusoidal, learned) are added to the embeddings by the layer that owns them (`AbsolutePositions`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

ABSOLUTE = ("sinusoidal", "learned", "none")


@dataclass(frozen=True)
class Positions:
    """Integer positions of the queries [B|1, Tq] and keys [B|1, Tk] (0-based, counted from the start
    of each sequence), and `causal`: query i may see only keys j ≤ i.

    A site gives them to mechanisms that declare `takes_positions` (`Attention.attend_at`), which pass
    them on to scores that declare `uses_positions`. A decoding step has Tq = 1 at position t and the
    cached keys at 0..t.
    """

    query: torch.Tensor
    key: torch.Tensor
    causal: bool = False

    @staticmethod
    def span(length: int, device: torch.device | None = None, start: int = 0) -> torch.Tensor:
        """[1, length] positions start, start+1, ..."""
        return torch.arange(start, start + length, device=device)[None]

    @classmethod
    def self_attention(cls, length: int, causal: bool, device: torch.device | None = None) -> Positions:
        """A sequence attending to itself: queries and keys both at 0..length-1."""
        span = cls.span(length, device)
        return cls(span, span, causal)

    def aligned(self) -> bool:
        """Queries and keys at the same positions (an encoder, teacher forcing): query i and key i are the
        same token, and under a causal mask query i sees keys 0..i by index."""
        return self.query.size(-1) == self.key.size(-1) and bool((self.query == self.key).all())

    def relative(self, ndim: int = 3) -> torch.Tensor:
        """j − i for every (query i, key j): [B|1, Tq, Tk], with singleton dims inserted after the batch
        so it broadcasts against scores of `ndim` dims (4 for [B, H, Tq, Tk])."""
        rel = self.key[:, None, :] - self.query[:, :, None]
        return rel.view(rel.size(0), *[1] * (ndim - 3), *rel.shape[1:])

    def visible(self) -> torch.Tensor | None:
        """[B|1, Tq, Tk] bool, True where key j ≤ query i; None when not causal (all visible)."""
        return self.relative() <= 0 if self.causal else None


def sinusoidal_positions(max_len: int, dim: int) -> torch.Tensor:
    """PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d))  (Vaswani et al. 2017)."""
    position = torch.arange(max_len, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(max_len, dim)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)[:, : dim // 2]
    return table


class AbsolutePositions(nn.Module):
    """x_p + PE[p] for p < max_len: "sinusoidal" (Vaswani et al. 2017), "learned" (Gehring et al. 2017,
    Devlin et al. 2019) or "none" (positions come from the attention's score, or nowhere; no length limit)."""

    table: torch.Tensor | None  # a parameter (learned), a buffer (sinusoidal) or None

    def __init__(self, kind: str, max_len: int, dim: int) -> None:
        super().__init__()
        if kind not in ABSOLUTE:
            raise ValueError(f"positions must be one of {', '.join(ABSOLUTE)}; got positions={kind!r}")
        self.kind, self.max_len = kind, max_len
        if kind == "learned":
            self.table = nn.Parameter(torch.randn(max_len, dim) * 0.02)
        elif kind == "sinusoidal":
            self.register_buffer("table", sinusoidal_positions(max_len, dim), persistent=False)
        else:
            self.table = None

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x [B, T, D] at positions start..start+T-1."""
        if self.table is None:
            return x
        end = start + x.size(1)
        if end > self.max_len:
            raise ValueError(f"position {end - 1} exceeds max_len={self.max_len}")
        return x + self.table[start:end]
