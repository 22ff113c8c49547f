"""A small rnn decoder and its inputs, for the compiled regions' tests (attnx.nn.fusion): the unit ones
(tests/unit/nn/test_fusion.py) and those that compile with Inductor (e2e/train/test_fusion_compiled.py)."""

from __future__ import annotations

from typing import Any

import torch

from attnx import registry
from attnx.nn.attention import Mechanism
from attnx.nn.decoders import RNNDecoder
from attnx.nn.encoders import EncoderOutput
from attnx.vocab import BOS, EOS, PAD

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
