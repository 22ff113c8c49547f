"""How parameters are optimised: which of them weight decay applies to, and the learning-rate schedule
that conf/optim/scheduler/*.yaml instantiate."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn


def param_groups(module: nn.Module) -> list[dict[str, Any]]:
    """Two optimiser groups of named parameters (nanoGPT's split): weight matrices and embeddings decay
    (the optimiser's weight_decay); biases, norm gains and scalar temperatures (dim < 2) do not: decay
    would pull each towards an arbitrary value (a zero gain, τ = 1 for cosine's log τ) while they hold
    too few parameters to overfit with."""
    named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
    groups: list[dict[str, Any]] = [
        {"params": [(n, p) for n, p in named if p.dim() >= 2]},
        {"params": [(n, p) for n, p in named if p.dim() < 2], "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


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
