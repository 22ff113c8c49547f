"""Encoders: token ids -> contextual states, a summary vector and the padding mask."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from attnx.registry import register_encoder


class EncoderOutput(NamedTuple):
    states: torch.Tensor  # [B, T, D]
    summary: torch.Tensor  # [B, D]
    mask: torch.Tensor  # [B, T] bool, True = real token


class Encoder(nn.Module):
    """Base class of the `encoder` kind: `forward(tokens [B,T], lengths [B]) -> EncoderOutput`."""

    output_dim: int

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        raise NotImplementedError
