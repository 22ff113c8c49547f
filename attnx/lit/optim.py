"""The learning-rate schedule that conf/optim/scheduler/*.yaml instantiate."""

from __future__ import annotations

import math

import torch


def warmup_schedule(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_steps: int, cosine: bool
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up to the optimiser's lr, then a half cosine to zero (or the lr held):

        lr_t = lr · (t + 1) / (w + 1)                      for t < w
        lr_t = lr · ½ (1 + cos(π (t - w) / (T - w)))      for t ≥ w, cosine
        lr_t = lr                                          for t ≥ w, constant

    with t the optimiser step, T = total_steps (Lightning's trainer.estimated_stepping_batches) and
    w = min(warmup_steps, T - 1), so a run shorter than its warm-up still reaches its peak."""
    warmup = min(warmup_steps, total_steps - 1)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if not cosine:
            return 1.0
        return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, total_steps - warmup)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
