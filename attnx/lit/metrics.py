"""Metrics of attnx's own, as torchmetrics Metrics: their states sum across DDP ranks like the built-ins'."""

from __future__ import annotations

import torch
from torchmetrics import Metric

MAX_LENGTH = 1024  # longer sources count as this length


class ByLength(Metric):
    """The mean of a per-example score (exact match) at each source length: the curve of Bahdanau et
    al. (2015, Fig. 2), accuracy against length, from one test split with a range of lengths."""

    full_state_update = False

    total: torch.Tensor  # states, summed over ranks: the scores and examples at each length
    count: torch.Tensor

    def __init__(self, max_length: int = MAX_LENGTH) -> None:
        super().__init__()
        self.add_state("total", torch.zeros(max_length + 1, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.zeros(max_length + 1, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, lengths: torch.Tensor, scores: torch.Tensor) -> None:
        index = lengths.clamp(max=len(self.total) - 1).to(self.total.device)
        self.total.index_add_(0, index, scores.to(self.total))
        self.count.index_add_(0, index, torch.ones_like(scores, dtype=self.count.dtype))

    def compute(self) -> dict[int, float]:
        return {n: float(self.total[n] / self.count[n]) for n in self.lengths()}

    def counts(self) -> dict[int, int]:
        """How many examples each length had (after `compute`, whose sync they share)."""
        return {n: int(self.count[n]) for n in self.lengths()}

    def lengths(self) -> list[int]:
        found: list[int] = self.count.nonzero().flatten().tolist()
        return found
