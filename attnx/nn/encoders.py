"""Encoders: token ids -> contextual states, a summary vector and the padding mask."""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from attnx import registry
from attnx.nn.attention import Mechanism
from attnx.nn.cells import cell_update
from attnx.nn.fusion import Fusable, is_compiled
from attnx.nn.positions import AbsolutePositions, Positions
from attnx.nn.transformer import SelfAttentionBlock
from attnx.registry import Slot, register_encoder
from attnx.vocab import PAD

RNNClass = type[nn.GRU] | type[nn.LSTM] | type[nn.RNN]  # not RNNBase, whose first argument is the mode
RNN_CELLS: dict[str, RNNClass] = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}


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


def length_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """[B] lengths -> [B, max_len] bool, True at the first `lengths[b]` positions."""
    return torch.arange(max_len, device=lengths.device) < lengths[:, None]


def rnn_class(cell: str) -> RNNClass:
    if cell not in RNN_CELLS:
        raise ValueError(f"cell must be one of {', '.join(RNN_CELLS)}; got cell={cell!r}")
    return RNN_CELLS[cell]


def choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {name}={value!r}")
    return value


@register_encoder("rnn")
class RNNEncoder(Encoder, Fusable):
    """Recurrent encoder over padded sequences of any lengths (Sutskever et al. 2014; Bahdanau et al. 2015).

    states h_j = [→h_j; ←h_j] (zero at padding), summary = the last layer's final hidden state of
    each direction, concatenated. Padding never enters a state or the summary: →h runs over the
    left-aligned batch and stops mattering at each sequence's end; ←h runs over each sequence
    reversed within its length, so it starts at its last real token.

    Each direction of each layer is one whole-sequence call of torch's RNN kernel with the module's
    own weights, over the padded batch. Packed sequences would skip the padding, but torch's packed
    kernel slices its input gates step by step, and the backward of each slice zero-fills a copy of all
    of them: O(T²) memory traffic, a quarter of the default seq2seq training step (benchmarks/README.md §9).
    Compiled (`compile: true`, in training), each runs `_recurrence`, the same cell written out step by
    step, which Dynamo can trace where it refuses torch's RNN modules (attnx.nn.fusion).
    """

    fusable = ("_recurrence",)

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int = 64,
        hidden_dim: int = 128,
        cell: str = "gru",
        num_layers: int = 1,
        bidirectional: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__(vocab_size)
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.dropout = nn.Dropout(dropout)
        self.rnn = rnn_class(cell)(
            embed_dim,
            hidden_dim,
            num_layers,
            batch_first=True,
            bidirectional=bidirectional,
            dropout=dropout if num_layers > 1 else 0.0,  # torch applies it between layers only
        )
        self.directions = 2 if bidirectional else 1
        self.output_dim = hidden_dim * self.directions
        self.cell = cell

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        x = self.dropout(self.embed(tokens))
        mask = length_mask(lengths, tokens.size(1))
        reverse = reversal(lengths, tokens.size(1))
        finals: list[torch.Tensor] = []
        for layer in range(self.rnn.num_layers):
            if layer > 0:
                x = nn.functional.dropout(x, self.rnn.dropout, self.training)
            outputs, finals = [], []
            for direction in range(self.directions):
                inputs = x if direction == 0 else x.gather(1, reverse.expand(-1, -1, x.size(-1)))
                out = self._run(inputs, layer, direction)
                finals.append(out.gather(1, (lengths - 1).view(-1, 1, 1).expand(-1, 1, out.size(-1)))[:, 0])
                outputs.append(out if direction == 0 else out.gather(1, reverse.expand(-1, -1, out.size(-1))))
            x = torch.cat(outputs, dim=-1) * mask[..., None]
        summary = torch.cat(finals, dim=-1)
        return EncoderOutput(self.dropout(x), self.dropout(summary), mask)

    def _run(self, x: torch.Tensor, layer: int, direction: int) -> torch.Tensor:
        """One layer and direction of `self.rnn` over x [B, T, ·] from a zero state -> outputs [B, T, H]."""
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        weights = [
            getattr(self.rnn, f"{name}{suffix}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        ]
        if self.training and is_compiled(self._recurrence):
            return self._compiled(x, *weights)
        h0 = x.new_zeros(1, x.size(0), self.rnn.hidden_size)
        if isinstance(self.rnn, nn.LSTM):
            return torch._VF.lstm(x, (h0, h0), weights, True, 1, 0.0, self.training, False, True)[0]
        kernel = torch._VF.gru if isinstance(self.rnn, nn.GRU) else torch._VF.rnn_tanh
        return kernel(x, h0, weights, True, 1, 0.0, self.training, False, True)[0]

    def _compiled(
        self, x: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor
    ) -> torch.Tensor:
        """`_run` through the compiled `_recurrence`, on input gates W_ih x_t + b_ih for every step at
        once, padded to `widest` (`Fusable`): the steps after a sequence's end are never read (each
        direction runs over its sequences left-aligned)."""
        gates = self.pad_to_widest(F.linear(x, w_ih, b_ih))
        return self._recurrence(gates, w_hh, b_hh)[:, : x.size(1)]

    def _recurrence(self, input_gates: torch.Tensor, w_hh: torch.Tensor, b_hh: torch.Tensor) -> torch.Tensor:
        """The cell over input gates [B, T, gates·H] from a zero state: outputs h_t [B, T, H]."""
        h = input_gates.new_zeros(input_gates.size(0), w_hh.size(1))
        state: Any = (h, h) if self.cell == "lstm" else h
        outputs = []
        for gates in input_gates.unbind(1):
            state = cell_update(
                self.cell, gates, F.linear(state[0] if self.cell == "lstm" else state, w_hh, b_hh), state
            )
            outputs.append(state[0] if self.cell == "lstm" else state)
        return torch.stack(outputs, 1)


def reversal(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """[B, width, 1] gather index that reverses each row's first `lengths` positions (and keeps the
    padding after them): its own inverse."""
    steps = torch.arange(width, device=lengths.device)
    index = torch.where(steps < lengths[:, None], lengths[:, None] - 1 - steps, steps)
    return index[..., None]


@register_encoder("self_attn")
class SelfAttentionEncoder(Encoder):
    """Transformer encoder (Vaswani et al. 2017) of pre-LN blocks whose self-attention is any
    registered mechanism that declares `self_attention` (the slot `attention`, with its `score`), or
    each block its own (`layers`, the slot's plan: a mechanism per block, or a pattern repeated).

    summary = mean of the unmasked states, or the state of a learned CLS token prepended to the
    input (Devlin et al. 2019). States and mask are aligned with the input tokens (CLS removed);
    padded states are zero. `positions` is the absolute encoding added to the embeddings ("none"
    for models whose score carries positions: alibi, t5_bias, rope). Set `record_weights = True` to
    keep each layer's self-attention weights in `attention_weights` ([B, (H,) T', T'] with T' = T,
    or T+1 with CLS first).
    """

    slots: ClassVar[dict[str, Slot]] = {"attention": Slot(default="multi_head", role="self", plan="layers")}

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        num_layers: int = 2,
        ff_dim: int = 128,
        dropout: float = 0.1,
        positions: str = "sinusoidal",
        max_len: int = 512,
        summary: str = "mean",
        attention: Mechanism | None = None,
        layers: list[Mechanism] | None = None,
    ) -> None:
        super().__init__(vocab_size)
        self.summary = choice("summary", summary, ("mean", "cls"))
        pattern = layers or [attention or default_mechanism(self.slots["attention"])]
        if num_layers % len(pattern):
            raise ValueError(
                f"layers has {len(pattern)} mechanisms for num_layers={num_layers}: one per block, or a "
                "pattern whose length divides num_layers"
            )
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=PAD)
        self.positions = AbsolutePositions(positions, max_len, d_model)
        self.cls = nn.Parameter(torch.randn(1, 1, d_model) * 0.02) if summary == "cls" else None
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            SelfAttentionBlock(d_model, pattern[i % len(pattern)], ff_dim, dropout) for i in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model)  # pre-LN leaves the residual stream unnormalised
        self.output_dim = d_model
        self.record_weights = False
        self.attention_weights: list[torch.Tensor] = []

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        batch, length = tokens.shape
        if length > self.max_len:
            raise ValueError(f"input length {length} exceeds the encoder's max_len={self.max_len}")
        mask = length_mask(lengths, length)
        x = self.positions(self.embed(tokens))
        attend_mask = mask
        if self.cls is not None:
            # CLS sits at position 0 of the layers' Positions, the tokens at 1..T (their absolute
            # encodings stay 0..T-1, as without CLS)
            x = torch.cat([self.cls.expand(batch, -1, -1), x], dim=1)
            attend_mask = torch.cat([mask.new_ones(batch, 1), mask], dim=1)
        positions = Positions.self_attention(x.size(1), causal=False, device=x.device)
        x = self.dropout(x)
        weights = []
        for block in self.blocks:
            x, w = block(x, attend_mask, positions, need_weights=self.record_weights)
            weights.append(w)
        self.attention_weights = weights if self.record_weights else []
        x = self.norm(x)
        states = x[:, -length:] * mask[..., None]  # drops the CLS slot, if any
        summary = x[:, 0] if self.cls is not None else states.sum(1) / lengths[:, None].to(states.dtype)
        return EncoderOutput(states, summary, mask)


def default_mechanism(slot: Slot) -> Mechanism:
    """The slot's default mechanism with its default score, for models built from Python."""
    return Mechanism(registry.get("attention", slot.default))
