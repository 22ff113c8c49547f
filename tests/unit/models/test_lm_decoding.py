"""CausalLM's cached decoding: a prompt's prefill, then one token at a time through each block's key/value
cache and convolution state, equals the full causal pass."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from attnx import registry
from attnx.models.assembly import build_model
from attnx.models.lm import CausalLM
from attnx.nn.transformer import KVCache

VOCAB, D, T, PROMPT = 20, 8, 9, 4
MECHANISMS = {
    "multi_head": {"name": "multi_head", "num_heads": 2},
    "linear": {"name": "linear", "num_heads": 2},  # attnx.contrib: incremental, a prefix-sum state
    "sliding_window": {"name": "sliding_window", "num_heads": 2, "window": 3},  # attnx.contrib
}


def lm(attention: str = "multi_head", **section: Any) -> CausalLM:
    registry.load_all()  # the shipped plugins (attnx.contrib) register through their entry points
    torch.manual_seed(0)
    sizes = {"d_model": D, "num_layers": 2, "ff_dim": 16, "max_len": 32, **section}
    model = build_model("lm", VOCAB, None, MECHANISMS[attention], None, None, lm=sizes)
    assert isinstance(model, CausalLM)
    with torch.no_grad():  # random convolution taps: the initial identity would hide a misaligned state
        for name, p in model.named_parameters():
            if name.endswith("conv.weight"):
                p.normal_()
    return model.double().eval()


def decoded(model: CausalLM, tokens: torch.Tensor) -> torch.Tensor:
    """Logits of every position: the prompt's from prefill, then one step per token."""
    logits, state = model.prefill(tokens[:, :PROMPT])
    steps = [logits]
    for t in range(PROMPT, tokens.size(1)):
        assert state.length == t  # the step reads position t
        step, state = model.step(tokens[:, t], state)
        steps.append(step[:, None])
    return torch.cat(steps, dim=1)


@pytest.mark.parametrize("conv", [0, 3])
@pytest.mark.parametrize("attention", list(MECHANISMS))
def test_prefill_then_cached_steps_equal_the_full_forward_pass(attention: str, conv: int) -> None:
    model = lm(attention, conv=conv, ff="swiglu" if conv else "gelu")
    tokens = torch.randint(4, VOCAB, (2, T))
    full, _ = model(tokens, torch.tensor([T, T]))
    torch.testing.assert_close(decoded(model, tokens), full, rtol=0, atol=1e-10)


def test_reordering_the_state_reorders_the_continuations() -> None:
    model, tokens = lm(conv=3), torch.randint(4, VOCAB, (2, T))
    _, state = model.prefill(tokens[:, :PROMPT])
    index = torch.tensor([1, 1, 0])
    reordered, _ = model.step(tokens[index, PROMPT], state.select(index))
    direct, _ = model.step(tokens[:, PROMPT], state)
    torch.testing.assert_close(reordered, direct[index], rtol=0, atol=1e-12)


def test_decoding_past_max_len_names_the_position_table() -> None:
    model = lm(max_len=5)
    _, state = model.prefill(torch.randint(4, VOCAB, (1, 5)))
    with pytest.raises(ValueError, match="position 5 is past lm.max_len=5, the length of the sinusoidal"):
        model.step(torch.tensor([4]), state)
    unbounded = lm(max_len=5, positions="none")  # relative positions: no table, no limit
    _, state = unbounded.prefill(torch.randint(4, VOCAB, (1, 5)))
    assert unbounded.step(torch.tensor([4]), state)[1].length == 6


def test_a_negative_conv_is_refused() -> None:
    with pytest.raises(ValueError, match="conv must be 0 \\(none\\) or a kernel size >= 1; got conv=-1"):
        lm(conv=-1)


@pytest.mark.parametrize("conv", [0, 3])
@pytest.mark.parametrize("attention", list(MECHANISMS))
def test_state_size_is_each_sites_cache_plus_the_convolutions_last_inputs(attention: str, conv: int) -> None:
    model = lm(attention, conv=conv)
    site = model.blocks[0].attention.mechanism
    cache = KVCache.state_size(site, T)  # the mechanism's own count (its state_size), per block
    assert cache is not None and model.state_size(T) == 2 * (cache + (conv - 1 if conv else 0) * D)


def test_state_size_is_none_when_a_mechanism_declares_none(monkeypatch: pytest.MonkeyPatch) -> None:
    model = lm()
    monkeypatch.setattr(type(model.blocks[0].attention.mechanism), "state_size", lambda self, n: None)
    assert model.state_size(T) is None
