"""`lm.init` and `lm.tie_embeddings` (attnx.nn.init, attnx.models.lm): GPT-2's and Zoology's N(0, 0.02)
start, and the read-out through the embedding table."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnx.models.lm import CausalLM
from attnx.nn.attention import Mechanism
from attnx.nn.init import initialise
from attnx.registry import get
from attnx.vocab import PAD


def lm(**kwargs: object) -> CausalLM:
    torch.manual_seed(0)
    based = Mechanism(get("attention", "based"), None, {"feature_dim": 4, "num_heads": 1})
    return CausalLM(50, based, d_model=16, num_layers=2, conv=3, **kwargs)  # type: ignore[arg-type]


def test_normal_draws_every_linear_and_embedding_weight_at_std_002_with_zero_biases() -> None:
    model = lm(init="normal")
    weights = [m.weight for m in model.modules() if isinstance(m, nn.Linear | nn.Embedding)]
    assert len(weights) >= 6
    assert torch.cat([w.flatten() for w in weights]).std().item() == pytest.approx(0.02, rel=0.1)
    assert all(not m.bias.any() for m in model.modules() if isinstance(m, nn.Linear) and m.bias is not None)
    assert not model.embed.weight[PAD].any()
    identity = torch.zeros(16, 1, 3)
    identity[:, 0, -1] = 1
    assert torch.equal(model.blocks[0].conv.weight, identity)  # not a Linear: its own start is kept


def test_torch_is_the_default_and_changes_nothing() -> None:
    default, torch_init = lm(), lm(init="torch")
    assert all(torch.equal(a, b) for a, b in zip(default.parameters(), torch_init.parameters()))
    assert default.embed.weight.std().item() == pytest.approx(1.0, rel=0.1)  # nn.Embedding's N(0, 1)


def test_tied_embeddings_read_out_through_the_embedding_table_and_decode_as_forward() -> None:
    model = lm(init="normal", tie_embeddings=True).eval()
    assert model.head.weight is model.embed.weight and model.head.bias is None
    untied = lm()
    assert untied.head.weight is not untied.embed.weight and untied.head.bias is not None  # the default
    tokens = torch.randint(1, 50, (2, 9))
    logits, _ = model(tokens, torch.full((2,), 9))
    prefix, state = model.prefill(tokens[:, :8])
    last, _ = model.step(tokens[:, 8], state)
    torch.testing.assert_close(prefix, logits[:, :8])
    torch.testing.assert_close(last, logits[:, 8], atol=1e-5, rtol=1e-4)
    logits.sum().backward()
    assert model.embed.weight.grad is not None and model.embed.weight.grad.abs().sum() > 0


def test_a_wrong_init_is_one_line() -> None:
    with pytest.raises(ValueError, match="init must be one of torch, normal; got init='xavier'"):
        lm(init="xavier")
    with pytest.raises(ValueError, match="init_std must be > 0"):
        initialise(nn.Linear(2, 2), "normal", std=0.0)
