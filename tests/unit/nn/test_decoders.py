"""RNN decoder: every placement teacher-forced and stepwise, fast path == step loop, key work hoisted."""

import pytest
import torch

from attnx import registry
from attnx.nn.attention import Mechanism
from attnx.nn.classic import LuongAttention
from attnx.nn.decoders import RNNDecoder
from attnx.nn.encoders import EncoderOutput
from attnx.vocab import BOS, EOS, PAD

VOCAB, EMBED, HIDDEN, ENC = 11, 6, 8, 10
LENGTHS = torch.tensor([5, 2, 4])

# name, hyperparameters, placement, runs all U steps in one RNN call
MECHANISMS = [
    ("none", {}, "none", True),
    ("fixed_c", {}, "fixed_c", True),
    ("additive", {}, "before", False),
    ("dot", {"input_feeding": True}, "after", False),
    ("dot", {"input_feeding": False}, "after", True),
    ("multi_head", {"num_heads": 2}, "after", True),
]
IDS = ["none", "fixed_c", "additive", "dot-feed", "dot-nofeed", "multi_head"]


def encoded(dim: int = ENC) -> EncoderOutput:
    mask = torch.arange(5) < LENGTHS[:, None]
    return EncoderOutput(torch.randn(3, 5, dim) * mask[..., None], torch.randn(3, dim), mask)


def decoder(name: str, hp: dict, cell: str = "gru", num_layers: int = 1, enc_dim: int = ENC) -> RNNDecoder:
    """The decoder builds the mechanism: scored mechanisms attend in the decoder's space."""
    mechanism = Mechanism(registry.get("attention", name), None, hp)
    return RNNDecoder(
        VOCAB, enc_dim, mechanism, embed_dim=EMBED, hidden_dim=HIDDEN, cell=cell, num_layers=num_layers
    ).eval()


def step_loop(dec: RNNDecoder, enc: EncoderOutput, tgt_in: torch.Tensor):
    state = dec.init_state(enc)
    logits, weights = [], []
    for t in range(tgt_in.size(1)):
        logits_t, state, weights_t = dec.step(tgt_in[:, t], state)
        logits.append(logits_t)
        weights.append(weights_t)
    return torch.stack(logits, 1), None if weights[0] is None else torch.stack(weights, -2)


@pytest.mark.parametrize("cell,num_layers", [("gru", 1), ("lstm", 2), ("rnn", 1)])
@pytest.mark.parametrize(("name", "hp", "placement", "parallel"), MECHANISMS, ids=IDS)
def test_teacher_forcing_equals_step_loop(name, hp, placement, parallel, cell, num_layers) -> None:
    dec = decoder(name, hp, cell, num_layers)
    assert (dec.placement, dec.parallel) == (placement, parallel)
    enc, tgt_in = encoded(), torch.randint(1, VOCAB, (3, 7))
    logits, weights = dec(enc, tgt_in)
    assert logits.shape == (3, 7, VOCAB)
    stepped_logits, stepped_weights = step_loop(dec, enc, tgt_in)
    torch.testing.assert_close(logits, stepped_logits, atol=1e-5, rtol=1e-5)
    if placement in ("none", "fixed_c"):
        assert weights is None and stepped_weights is None
        return
    heads = (hp["num_heads"],) if "num_heads" in hp else ()
    assert weights.shape == (3, *heads, 7, 5)
    torch.testing.assert_close(weights, stepped_weights, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    key_mask = enc.mask.view(3, *(1 for _ in heads), 1, 5).expand_as(weights)
    assert (weights[~key_mask] == 0).all()


@pytest.mark.parametrize(("name", "hp", "placement", "parallel"), MECHANISMS, ids=IDS)
def test_placement_decides_what_the_decoder_sees(name, hp, placement, parallel) -> None:
    """none/fixed_c see only the summary; attention mechanisms read the states."""
    dec = decoder(name, hp)
    enc, tgt_in = encoded(), torch.randint(1, VOCAB, (3, 4))
    other_states = EncoderOutput(torch.randn_like(enc.states) * enc.mask[..., None], enc.summary, enc.mask)
    other_summary = EncoderOutput(enc.states, torch.randn_like(enc.summary), enc.mask)
    logits = dec(enc, tgt_in)[0]
    assert (logits - dec(other_summary, tgt_in)[0]).abs().max() > 1e-2  # the bridge s_0 = tanh(W h)
    change = (logits - dec(other_states, tgt_in)[0]).abs().max()
    if placement in ("before", "after"):
        assert change > 1e-2
    else:
        assert change == 0  # never read, not merely down-weighted


@pytest.mark.parametrize(("name", "hp", "placement", "parallel"), MECHANISMS[1:], ids=IDS[1:])
def test_key_work_runs_once_per_sequence(name, hp, placement, parallel, monkeypatch) -> None:
    dec = decoder(name, hp)
    calls = []
    original = dec.attention.prepare
    monkeypatch.setattr(dec.attention, "prepare", lambda *args: calls.append(1) or original(*args))
    enc, tgt_in = encoded(), torch.randint(1, VOCAB, (3, 6))
    dec(enc, tgt_in)
    assert len(calls) == 1
    state = dec.init_state(enc)
    for t in range(6):
        _, state, _ = dec.step(tgt_in[:, t], state)
    assert len(calls) == 2


@pytest.mark.parametrize(("name", "hp", "placement", "parallel"), MECHANISMS, ids=IDS)
def test_select_reorders_the_recurrent_state(name, hp, placement, parallel) -> None:
    dec = decoder(name, hp, cell="lstm", num_layers=2)
    enc = encoded()
    same_source = EncoderOutput(*(t[:1].expand(3, *t.shape[1:]) for t in enc))  # beams of one source
    state = dec.init_state(same_source)
    _, state, _ = dec.step(torch.tensor([4, 5, 6]), state)
    index = torch.tensor([2, 2, 0])
    logits, _, _ = dec.step(torch.tensor([7, 7, 7]), state)
    reordered, _, _ = dec.step(torch.tensor([7, 7, 7]), state.select(index))
    torch.testing.assert_close(reordered, logits[index])
    assert not torch.allclose(logits[0], logits[1])


def test_input_feeding_feeds_the_attentional_state() -> None:
    dec = decoder("dot", {"input_feeding": True})
    assert dec.rnn.input_size == EMBED + HIDDEN
    state = dec.init_state(encoded())
    assert torch.equal(state.feed, torch.zeros(3, 1, HIDDEN))
    _, state, _ = dec.step(torch.tensor([4, 5, 6]), state)
    assert state.feed.abs().sum() > 0
    assert decoder("dot", {"input_feeding": False}).rnn.input_size == EMBED
    assert decoder("multi_head", {"num_heads": 2}).input_feeding is False  # no such option: no feeding


@pytest.mark.parametrize("name", ["dot", "multi_head", "additive"])
def test_states_are_projected_when_dims_differ(name) -> None:
    """`dot` needs Dq == Dk: a decoder of size 8 over encoder states of size 10 attends over W_m h."""
    dec = decoder(name, {})
    assert dec.project is not None and dec.project.weight.shape == (HIDDEN, ENC)
    logits, _ = dec(encoded(), torch.randint(1, VOCAB, (3, 4)))
    logits.sum().backward()
    assert dec.project.weight.grad.abs().sum() > 0
    same = decoder(name, {}, enc_dim=HIDDEN)
    assert same.project is None  # same dims: attend over the states themselves (pure Luong dot)
    assert same(encoded(HIDDEN), torch.randint(1, VOCAB, (3, 4)))[0].shape == (3, 4, VOCAB)


def test_unknown_placement_is_rejected() -> None:
    class Sideways(LuongAttention):
        placement = "sideways"

    with pytest.raises(ValueError, match="placement='sideways'"):
        RNNDecoder(VOCAB, ENC, Mechanism(Sideways), embed_dim=EMBED, hidden_dim=HIDDEN)


@pytest.mark.parametrize(("name", "hp", "placement", "parallel"), MECHANISMS, ids=IDS)
def test_gradients_reach_every_decoder_parameter(name, hp, placement, parallel) -> None:
    dec = decoder(name, hp, cell="lstm", num_layers=2).train()
    logits, _ = dec(encoded(), torch.randint(1, VOCAB, (3, 4)))
    logits.sum().backward()
    assert [n for n, p in dec.named_parameters() if p.grad is None or p.grad.abs().sum() == 0] == []


def targets_with_eos(lengths: list[int], width: int) -> torch.Tensor:
    """Teacher-forcing inputs BOS y_1..y_n EOS PAD.. of n = lengths tokens, cut to `width` columns."""
    rows = []
    for n in lengths:
        row = [BOS, *torch.randint(4, VOCAB, (n,)).tolist(), EOS]
        rows.append((row + [PAD] * width)[:width])
    return torch.tensor(rows)


@pytest.mark.parametrize("cell,num_layers", [("gru", 2), ("lstm", 1), ("rnn", 2)])
@pytest.mark.parametrize(
    ("name", "hp"), [("additive", {}), ("dot", {"input_feeding": True})], ids=["before", "feed"]
)
def test_hoisted_teacher_forcing_has_the_step_loops_logits_and_gradients(
    name, hp, cell, num_layers, monkeypatch
) -> None:
    """The recurrent placements teacher-force without the RNN module's per-step call (the embedding
    part of the input gates is hoisted out of the loop), and without weights only on the positions
    whose target goes on: logits and gradients equal the step loop's there, and are 0 elsewhere."""
    dec = decoder(name, hp, cell, num_layers)
    enc, tgt_in = encoded(), targets_with_eos([2, 6, 4], 7)
    goes_on = (tgt_in != PAD) & (tgt_in != EOS)
    target = torch.randn(3, 7, VOCAB) * goes_on[..., None]

    def run(forward) -> tuple[torch.Tensor, list[torch.Tensor]]:
        dec.zero_grad()
        logits = forward()[0]
        (logits * target).sum().backward()
        return logits, [p.grad.clone() for p in dec.parameters()]

    stepped, stepped_grads = run(lambda: step_loop(dec, enc, tgt_in))
    calls = []
    original = dec.rnn.forward
    monkeypatch.setattr(dec.rnn, "forward", lambda *args: calls.append(1) or original(*args))
    for need_weights in (True, False):
        logits, grads = run(lambda w=need_weights: dec(enc, tgt_in, need_weights=w))
        assert calls == []
        torch.testing.assert_close(logits[goes_on], stepped[goes_on], atol=1e-5, rtol=1e-5)
        if need_weights:
            torch.testing.assert_close(logits, stepped, atol=1e-5, rtol=1e-5)
        else:
            assert (logits[~goes_on] == 0).all()
        for a, b in zip(grads, stepped_grads):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
