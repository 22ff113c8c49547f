"""Optimiser and schedule by config alone: parameter groups for weight decay, the warm-up schedule's
equation, `optim=sgd` and `optim/scheduler=constant`."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from attnx import registry
from attnx.lit.optim import warmup_schedule

from helpers.runs import assembled
from helpers.tiny import TINY_MODEL, TINY_SELF_ATTN, sizes

# A self-attention encoder (LayerNorms) and cosine scores with a learned log τ in the decoder.
NORMS_AND_TAU = [
    *TINY_SELF_ATTN,
    "attention=dot",
    "score=cosine",
    "score.learn_temperature=true",
    *TINY_MODEL,
    *sizes(train=16, val=8, test=8),
    "paths.output_dir=unused",
]


def configured(*overrides: str, total_steps: int = 100) -> tuple[Any, Any]:
    """(optimizer, scheduler) from configure_optimizers for `attnx train <NORMS_AND_TAU> <overrides>`,
    outside a Trainer as benchmarks/common.py calls it."""
    registry.load_all()
    _, module, _ = assembled([*NORMS_AND_TAU, *overrides])
    module.trainer = SimpleNamespace(estimated_stepping_batches=total_steps)
    config = module.configure_optimizers()
    return config["optimizer"], config["lr_scheduler"]["scheduler"]


def learning_rates(optimizer: torch.optim.Optimizer, scheduler: Any, steps: int) -> list[float]:
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def test_weight_decay_skips_biases_norms_and_temperatures() -> None:
    optimizer, _ = configured()
    decay, no_decay = optimizer.param_groups
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert {
        "model.encoder.embed.weight",
        "model.encoder.blocks.0.attention.mechanism.W_q.weight",
        "model.decoder.embed.weight",
        "model.decoder.rnn.weight_hh_l0",
        "model.decoder.out.weight",
    } <= set(decay["param_names"])
    assert {
        "model.encoder.blocks.0.norm_attn.weight",
        "model.encoder.norm.bias",
        "model.decoder.rnn.bias_hh_l0",
        "model.decoder.out.bias",
        "model.decoder.attention.score.log_tau",
    } <= set(no_decay["param_names"])
    names = decay["param_names"] + no_decay["param_names"]
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    assert len(names) == len(set(names)) == sum(1 for g in optimizer.param_groups for _ in g["params"])


def test_the_default_is_adamw_warmed_up_then_cosine_to_zero() -> None:
    optimizer, scheduler = configured(total_steps=100)
    assert type(optimizer) is torch.optim.AdamW
    assert tuple(optimizer.defaults["betas"]) == (0.9, 0.999)
    rates = learning_rates(optimizer, scheduler, 100)
    assert rates[0] == pytest.approx(3e-3 / 51) and rates[50] == pytest.approx(3e-3)
    assert rates[99] < 1e-5 and max(rates) == pytest.approx(3e-3)


def test_sgd_and_a_constant_schedule_are_config_choices() -> None:
    optimizer, scheduler = configured(
        "optim=sgd", "optim/scheduler=constant", "optim.lr=0.02", "optim.scheduler.warmup_steps=4"
    )
    assert type(optimizer) is torch.optim.SGD
    assert optimizer.defaults["momentum"] == 0.9 and optimizer.defaults["nesterov"] is True
    rates = learning_rates(optimizer, scheduler, 100)
    assert rates[:4] == pytest.approx([0.004, 0.008, 0.012, 0.016])
    assert rates[4:] == pytest.approx([0.02] * 96)


def test_warmup_schedule_follows_its_equation() -> None:
    def rates(total: int, warmup: int, cosine: bool) -> list[float]:
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        return learning_rates(optimizer, warmup_schedule(optimizer, total, warmup, cosine), total)

    cosine = [0.5 * (1 + math.cos(math.pi * s / 6)) for s in range(6)]
    assert rates(10, 4, cosine=True) == pytest.approx([0.2, 0.4, 0.6, 0.8, *cosine])
    assert rates(10, 4, cosine=False) == pytest.approx([0.2, 0.4, 0.6, 0.8, *[1.0] * 6])
    assert rates(3, 50, cosine=False) == pytest.approx([1 / 3, 2 / 3, 1.0])  # warm-up capped at T - 1
