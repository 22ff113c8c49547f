"""Compiled regions (attnx.nn.fusion): the rnn decoder's compiled recurrence trains as the eager one
does, step for step, and the rnn encoder's equals torch's kernel; a region that cannot compile runs
eager and says so once; `compile` decides when a run compiles, and only rnn parts have regions."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
import torch

from attnx import registry
from attnx.config.compose import ConfigError, compose
from attnx.config.validation import validate
from attnx.lit.module import AUTO_MIN_STEPS, compiles
from attnx.nn.attention import Mechanism
from attnx.nn.classic import BahdanauAttention
from attnx.nn.decoders import RNNDecoder
from attnx.nn.encoders import EncoderOutput, RNNEncoder
from attnx.nn.fusion import compile_regions, is_compiled, regions_of
from attnx.testing import projection_loss
from attnx.vocab import BOS, EOS, PAD

from helpers.runs import assembled
from helpers.tiny import TINY_LM, TINY_MODEL, TINY_RNN, TINY_SELF_ATTN, TINY_TRANSFORMER

REGION = "RNNDecoder._recurrence"
ENCODER = "RNNEncoder._recurrence"
VOCAB = 11


def batch(lengths: list[int], width: int) -> tuple[EncoderOutput, torch.Tensor]:
    """Encoder states of 5 positions (the rows' sources 5, 2 and 4 long) and teacher-forcing inputs
    BOS y_1..y_n EOS PAD.. of n = `lengths` tokens in `width` columns."""
    mask = torch.arange(5) < torch.tensor([5, 2, 4])[:, None]
    enc = EncoderOutput(torch.randn(3, 5, 10) * mask[..., None], torch.randn(3, 10), mask)
    rows = [([BOS, *torch.randint(4, VOCAB, (n,)).tolist(), EOS] + [PAD] * width)[:width] for n in lengths]
    return enc, torch.tensor(rows)


def decoder(name: str, hp: dict[str, Any], cell: str, attention: type | None = None) -> RNNDecoder:
    """A 2-layer decoder in training mode, without dropout: the eager pass runs only the rows whose
    target goes on, the compiled one every row, so their dropout masks are different draws (of the
    same distribution) and only dropout-free steps can agree to float rounding."""
    mechanism = Mechanism(attention or registry.get("attention", name), None, hp)
    dec = RNNDecoder(VOCAB, 10, mechanism, embed_dim=6, hidden_dim=8, cell=cell, num_layers=2, dropout=0.0)
    return dec.train()


def train_losses(dec: RNNDecoder, batches: list[tuple[EncoderOutput, torch.Tensor]]) -> list[float]:
    """Losses of 20 Adam steps over `batches` (cycled), seeded alike for every model trained."""
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(dec.parameters(), lr=0.01)
    losses = []
    for step in range(20):
        enc, tgt_in = batches[step % len(batches)]
        logits, _ = dec(enc, tgt_in, need_weights=False)
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), tgt_in.roll(-1, 1).flatten(), ignore_index=0
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize(
    ("name", "hp", "cell"), [("additive", {}, "gru"), ("dot", {"input_feeding": True}, "lstm")]
)
def test_compiled_recurrence_trains_as_the_eager_one(name: str, hp: dict[str, Any], cell: str) -> None:
    """20 training steps on batches of widths 7 and 5: the same losses within 1e-5 relative,
    and the narrower batch is padded into the wider one's graph instead of compiling its own."""
    torch.manual_seed(1)
    eager = decoder(name, hp, cell)
    compiled = copy.deepcopy(eager)
    assert set(compile_regions(compiled)) == {REGION}
    batches = [batch([2, 6, 4], 7), batch([3, 1, 3], 5)]
    expected = train_losses(eager, batches)
    got = train_losses(compiled, batches)
    region = regions_of(compiled)[REGION]
    assert is_compiled(region) and region.graphs == 1, region.record()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=0)
    for a, b in zip(compiled.parameters(), eager.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_padding_to_the_widest_changes_no_bit() -> None:
    """A batch padded further (a resumed run starts from widest 0, the uninterrupted one had grown it)
    gets the same logits and gradients to the last bit: padded steps come last and add exact zeros."""
    torch.manual_seed(1)
    near = decoder("additive", {}, "gru")
    far = copy.deepcopy(near)
    compile_regions(near)
    compile_regions(far)
    far.widest = 12
    enc, tgt_in = batch([2, 6, 4], 7)
    results = []
    for dec in (near, far):
        logits, _ = dec(enc, tgt_in, need_weights=False)
        projection_loss(logits).backward()
        results.append([logits, *(p.grad for p in dec.parameters())])
    assert (near.widest, far.widest) == (7, 12)
    assert all(torch.equal(a, b) for a, b in zip(*results))


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_compiled_encoder_equals_the_rnn_kernel_with_gradients(cell: str) -> None:
    """Both directions of 2 layers over padded sequences: states, summary and every gradient as torch's
    kernel gives them; a shorter batch is padded into the longer one's graph."""
    torch.manual_seed(2)
    eager = RNNEncoder(VOCAB, embed_dim=6, hidden_dim=8, cell=cell, num_layers=2).train()
    compiled = copy.deepcopy(eager)
    assert set(compile_regions(compiled)) == {ENCODER}
    for width, lengths in ((7, [7, 2, 5]), (4, [3, 4, 1])):
        tokens = torch.randint(4, VOCAB, (3, width)) * (torch.arange(width) < torch.tensor(lengths)[:, None])
        outputs = []
        for encoder in (eager, compiled):
            encoder.zero_grad()
            out = encoder(tokens, torch.tensor(lengths))
            projection_loss(out.states, out.summary).backward()
            outputs.append([out.states, out.summary, *(p.grad for p in encoder.parameters())])
        for a, b in zip(*outputs):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert regions_of(compiled)[ENCODER].graphs == 1


class BranchingAttention(BahdanauAttention):
    """Bahdanau's attention with a branch on a value: correct, but Dynamo cannot trace it whole."""

    def attend(self, query: torch.Tensor, prepared: Any, need_weights: bool = True) -> Any:
        context, weights = super().attend(query, prepared, need_weights)
        if context.abs().max().item() > 1e6:  # a data-dependent branch: a graph break
            context = context.clamp(-1e6, 1e6)
        return context, weights


def test_a_region_that_cannot_compile_runs_eager_and_says_why_once(caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(1)
    dec = decoder("additive", {}, "gru", attention=BranchingAttention).eval()
    enc, tgt_in = batch([2, 6, 4], 7)
    expected, _ = dec(enc, tgt_in, need_weights=False)
    compile_regions(dec)
    dec.train()  # no dropout: the outputs compare with the eval pass
    with caplog.at_level(logging.WARNING, logger="attnx"):
        first, _ = dec(enc, tgt_in, need_weights=False)
        second, _ = dec(enc, tgt_in, need_weights=False)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith(f"compile: {REGION} runs eager: attend at test_fusion.py:")
    assert "\n" not in lines[0] and len(lines[0]) < 400
    assert not is_compiled(dec._recurrence)
    assert regions_of(dec)[REGION].record()["compiled"] is False
    torch.testing.assert_close(first, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(second, expected, rtol=1e-5, atol=1e-6)


def test_compile_policy_decides_by_the_runs_length() -> None:
    assert compiles(True, lambda: 1) and not compiles(False, lambda: 10**9)
    assert compiles("auto", lambda: AUTO_MIN_STEPS) and not compiles("auto", lambda: AUTO_MIN_STEPS - 1)
    assert compiles("auto", lambda: float("inf"))  # max_epochs=-1


@pytest.mark.parametrize("value", ["maybe", "1", "0"])
def test_compile_takes_true_false_or_auto(value: str) -> None:
    registry.load_all()
    with pytest.raises(ConfigError, match="compile must be true, false or auto"):
        validate(compose([f"compile={value}", "paths.output_dir=unused"]))


KINDS = {
    "seq2seq rnn": (["task=reverse", *TINY_MODEL], {ENCODER, REGION}),
    "seq2seq transformer": (["task=reverse", *TINY_SELF_ATTN, *TINY_TRANSFORMER], set()),
    "classification": (["task=sentiment", *TINY_SELF_ATTN], set()),
    "classification rnn": (["task=sentiment", *TINY_RNN], {ENCODER}),
    "lm": (TINY_LM, set()),
}


@pytest.mark.parametrize("kind", KINDS)
def test_fit_compiles_the_regions_a_model_has(kind: str) -> None:
    """`setup("fit")` wraps the fusable methods (compiled at their first call); other stages never do,
    and checkpoints keep their keys. Only the rnn encoder and decoder have regions today: every other
    part runs eager under `compile: true` (README)."""
    overrides, regions = KINDS[kind]
    registry.load_all()
    _, module, _ = assembled([*overrides, "compile=true", "paths.output_dir=unused"])
    keys = list(module.state_dict())
    module.setup("validate")
    assert regions_of(module.model) == {}
    module.setup("fit")
    assert set(regions_of(module.model)) == regions
    assert list(module.state_dict()) == keys
    assert (module.compile_record() is None) == (not regions)
