"""Fast paths give the explicit path's results: the fused self-attention encoder with gradients, the
training steps' use of the fused kernel, training-loss logging only on logger steps,
and the data loader's settings.

(SDPA inside MultiHeadAttention is tested in test_attention.py, the decoder's hoisted key work in
test_decoders.py.)
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from attnx import registry
from attnx.nn.attention import Mechanism
from attnx.nn.encoders import SelfAttentionEncoder
from attnx.nn.multihead import MultiHeadAttention
from attnx.testing import projection_loss

from helpers.runs import assembled
from helpers.tiny import FUSED


@pytest.fixture
def sdpa_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **kw: calls.append(1) or sdpa(*a, **kw))
    return calls


def built(task: str, *overrides: str) -> tuple[Any, Any]:
    """(task, LightningModule) as `attnx train task=<task> <FUSED> <overrides>` builds them, untrained."""
    registry.load_all()
    data, module, _ = assembled([f"task={task}", *FUSED, *overrides, "paths.output_dir=unused"])
    return data, module


def test_self_attention_encoder_fused_equals_explicit_with_gradients(sdpa_calls: list[int]) -> None:
    heads = Mechanism(MultiHeadAttention, None, {"num_heads": 4})
    encoder = SelfAttentionEncoder(20, 16, 2, 32, summary="cls", attention=heads).eval()
    tokens = torch.randint(4, 20, (3, 6))
    lengths = torch.tensor([6, 4, 1])
    tokens[torch.arange(6) >= lengths[:, None]] = 0

    def run(record: bool) -> list[torch.Tensor]:
        encoder.record_weights = record
        encoder.zero_grad()
        out = encoder(tokens, lengths)
        projection_loss(out.states, out.summary).backward()
        return [out.states, out.summary, *(p.grad.clone() for p in encoder.parameters())]

    explicit = run(record=True)
    assert sdpa_calls == []
    fused = run(record=False)
    assert len(sdpa_calls) == 2  # one per layer
    for a, b in zip(fused, explicit):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("task", "kernels"), [("reverse", 3), ("sentiment", 3)])
def test_training_steps_take_the_fused_kernel(task: str, kernels: int, sdpa_calls: list[int]) -> None:
    """2 encoder layers + the multi_head decoder (one call for all steps) or pooling: weights are
    never requested while training."""
    data, module = built(task)
    loss = module.training_step(next(iter(data.dataloader("train"))), 0)
    assert len(sdpa_calls) == kernels and loss.isfinite()


def test_dataloader_copies_nothing_needlessly() -> None:
    """In-memory tensors: no worker processes; pinned batches only when a GPU can use them."""
    data, _ = built("reverse")
    loader = data.dataloader("train", shuffle=True)
    assert loader.num_workers == 0
    assert loader.pin_memory == torch.cuda.is_available()
