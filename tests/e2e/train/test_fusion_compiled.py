"""Compiled regions (attnx.nn.fusion) compiled by Inductor: the rnn decoder's compiled recurrence trains as
the eager one does, step for step, padding a batch further changes no bit, and the rnn encoder's region
equals torch's kernel. What regions are and when a run compiles: tests/unit/nn/test_fusion.py.

Each compiles its graphs: Dynamo's seconds, then Inductor's code, which Inductor caches on disk (its
folder per user in the temp folder): a minute of C++ on a machine's first run, seconds after."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from attnx.nn.decoders import RNNDecoder
from attnx.nn.encoders import EncoderOutput, RNNEncoder
from attnx.nn.fusion import compile_regions, is_compiled, regions_of
from attnx.testing import projection_loss

from helpers.regions import ENCODER, REGION, VOCAB, batch, decoder

pytestmark = pytest.mark.engines  # each compiles with Inductor


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
