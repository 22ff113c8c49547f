"""The `decoder` kind's contract: what a `Seq2Seq` asks of its target side, whatever the network.

The built-in decoders (`rnn.py`, `transformer.py`) subclass `Decoder` as a plugin's would: greedy and
beam search drive any of them through `init_state`, `step` and `State.select` alone.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import torch
from torch import nn

from attnx.nn.encoders import EncoderOutput


class State(Protocol):
    """What `Decoder.init_state` returns and `step` advances; `select` reorders the batch (beams)."""

    def select(self, index: torch.Tensor) -> State: ...


class Decoder(nn.Module):
    """Base class of the `decoder` kind: the target side of a `Seq2Seq`.

    Constructed as cls(vocab_size, enc_dim, cross_attention, **hyperparams), `cross_attention` being the
    run's `attention` (and `score`) as a `Mechanism` to build for the decoder's dims.
      forward(enc, tgt_in [B, U], need_weights) -> (logits [B, U, V], cross weights [B, (H,) U, Tk] | None)
      init_state(enc) -> State;  step(y_prev [B], state, need_weights) -> (logits [B, V], state,
      weights [B, (H,) Tk] | None)
    Beam search expands the encoder output per beam before `init_state`, so a state's per-source
    parts need no reordering; `State.select` reorders the rest.
    """

    vocab_size: int
    cross_positions: ClassVar[bool] = False  # whether cross-attention gets query/key Positions

    def init_state(self, enc: EncoderOutput) -> State:
        raise NotImplementedError

    def step(
        self, y_prev: torch.Tensor, state: Any, need_weights: bool = True
    ) -> tuple[torch.Tensor, Any, torch.Tensor | None]:
        raise NotImplementedError

    def forward(
        self, enc: EncoderOutput, tgt_in: torch.Tensor, need_weights: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError
