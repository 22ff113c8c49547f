"""The RNN decoder (registered as "rnn"): hosts any attention mechanism at the place its paper puts it.

With s_t the top-layer RNN state, e_t = emb(y_{t-1}) and c_t the context, per `placement`:

  none     s_t = RNN(e_t, s_{t-1})                              o_t = s_t                 (Sutskever 2014)
  fixed_c  s_t = RNN([e_t; C], s_{t-1})                         o_t = tanh(W_o[s_t; C])   (Cho 2014)
  before   c_t = attend(s_{t-1}); s_t = RNN([e_t; c_t], s_{t-1}) o_t = tanh(W_o[s_t; c_t]) (Bahdanau 2015)
  after    s_t = RNN([e_t; o_{t-1}], s_{t-1}); c_t = attend(s_t) o_t = tanh(W_o[s_t; c_t]) (Luong 2015)

with s_0 = tanh(W_b h) from the encoder summary h for every placement, and logits_t = W_out o_t. For
"after", o_{t-1} is fed back only when the mechanism has `input_feeding = True`.

A mechanism built with key_dim != enc_dim attends over W_m h_j, encoder states projected once per
sequence into its key space (as Joey NMT does), so dims never restrict which score can be used.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from attnx.nn.attention import PLACEMENTS, Mechanism
from attnx.nn.cells import cell_update
from attnx.nn.decoders.base import Decoder
from attnx.nn.encoders import EncoderOutput, rnn_class
from attnx.nn.fusion import Fusable, is_compiled
from attnx.registry import register_decoder
from attnx.vocab import EOS, PAD

Hidden = torch.Tensor | tuple[torch.Tensor, torch.Tensor]  # [L, B, H], or (h, c) for an LSTM


class DecoderState(NamedTuple):
    """Everything a decoder step needs besides y_{t-1}.

    `memory` (prepared keys/values, or C [B, 1, D] for fixed_c) is computed once per sequence in
    `init_state`. `select` reorders only the recurrent parts: beam search expands the encoder
    output per source before `init_state` and reorders beams within a source, whose memory rows
    are identical.
    """

    hidden: Hidden
    feed: torch.Tensor | None  # o_{t-1} [B, 1, H] for input feeding
    memory: Any

    def select(self, index: torch.Tensor) -> DecoderState:
        hidden: Hidden
        if isinstance(self.hidden, tuple):
            h, c = self.hidden
            hidden = (h.index_select(1, index), c.index_select(1, index))
        else:
            hidden = self.hidden.index_select(1, index)
        feed = None if self.feed is None else self.feed.index_select(0, index)
        return self._replace(hidden=hidden, feed=feed)


@register_decoder("rnn")
class RNNDecoder(Decoder, Fusable):
    """Hosts `cross_attention` by its placement (module docstring): `forward` teacher-forces a whole
    target, `init_state` + `step` decode one token at a time for greedy and beam search. Scored
    mechanisms attend in the decoder's space (hidden_dim); none/fixed_c read C as the encoder gives it.
    """

    fusable = ("_recurrence",)

    def __init__(
        self,
        vocab_size: int,
        enc_dim: int,
        cross_attention: Mechanism,
        embed_dim: int = 64,
        hidden_dim: int = 128,
        cell: str = "gru",
        num_layers: int = 1,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.placement = cross_attention.cls.placement
        if self.placement not in PLACEMENTS:
            raise ValueError(
                f"attention {cross_attention.cls.__name__} has placement={self.placement!r}; "
                f"a decoder supports {', '.join(PLACEMENTS)}"
            )
        memory_dim = hidden_dim if self.placement in ("before", "after") else enc_dim
        attention = cross_attention(hidden_dim, memory_dim, memory_dim)
        self.attention = attention
        self.input_feeding = self.placement == "after" and bool(getattr(attention, "input_feeding", False))
        # Without a recurrence through the context, all U steps run as one RNN call.
        self.parallel = self.placement in ("none", "fixed_c") or (
            self.placement == "after" and not self.input_feeding
        )
        self.vocab_size, self.hidden_dim, self.num_layers = vocab_size, hidden_dim, num_layers
        self.cell, self.is_lstm = cell, cell == "lstm"
        context_dim = 0 if self.placement == "none" else attention.output_dim
        extra_input = {"fixed_c": context_dim, "before": context_dim}.get(self.placement, 0)
        if self.input_feeding:
            extra_input = hidden_dim

        self.project = None
        if self.placement in ("before", "after") and attention.key_dim != enc_dim:
            if attention.value_dim != attention.key_dim:
                raise ValueError("a decoder projects encoder states to key_dim; value_dim must equal it")
            self.project = nn.Linear(enc_dim, attention.key_dim, bias=False)
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.dropout = nn.Dropout(dropout)
        # One bridge for every placement; an LSTM gets both h_0 and c_0 from it.
        self.bridge = nn.Linear(enc_dim, hidden_dim * num_layers * (2 if self.is_lstm else 1))
        self.layer_dropout = dropout if num_layers > 1 else 0.0  # torch applies it between layers only
        self.rnn = rnn_class(cell)(
            embed_dim + extra_input, hidden_dim, num_layers, batch_first=True, dropout=self.layer_dropout
        )
        self.combine = (
            nn.Linear(hidden_dim + context_dim, hidden_dim, bias=False) if self.placement != "none" else None
        )
        self.out = nn.Linear(hidden_dim, vocab_size)

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        """s_0 from the encoder summary; the mechanism's per-sequence key work, done once here."""
        batch = enc.summary.size(0)
        h0 = torch.tanh(self.bridge(enc.summary)).view(batch, -1, self.hidden_dim).transpose(0, 1)
        hidden: Hidden = h0.contiguous()
        if self.is_lstm:
            hidden = (h0[: self.num_layers].contiguous(), h0[self.num_layers :].contiguous())
        memory = None
        if self.placement != "none":
            states = enc.states if self.project is None else self.project(enc.states)
            memory = self.attention.prepare(*self.attention.memory(states, enc.summary, enc.mask))
        if self.placement == "fixed_c":  # C does not depend on the step: compute it once
            memory, _ = self.attention.attend(self._top(hidden), memory, need_weights=False)
        feed = enc.summary.new_zeros(batch, 1, self.hidden_dim) if self.input_feeding else None
        return DecoderState(hidden, feed, memory)

    @staticmethod
    def _top(hidden: Hidden) -> torch.Tensor:
        """The top layer's state as a query [B, 1, H]."""
        h = hidden[0] if isinstance(hidden, tuple) else hidden
        return h[-1][:, None]

    def _advance(
        self, y_prev: torch.Tensor, state: DecoderState, need_weights: bool
    ) -> tuple[torch.Tensor, DecoderState, torch.Tensor | None]:
        """Run u steps at once, y_prev [B, u] -> (logits [B, u, V], state, weights [B, (H,) u, Tk]).

        u > 1 only when `self.parallel`; otherwise the context recurrence forces u = 1.
        """
        x = self.dropout(self.embed(y_prev))
        context, weights = None, None
        if self.placement == "before":
            context, weights = self.attention.attend(self._top(state.hidden), state.memory, need_weights)
        elif self.placement == "fixed_c":
            context = state.memory.expand(-1, y_prev.size(1), -1)
        if context is not None:
            x = torch.cat([x, context], dim=-1)
        elif state.feed is not None:  # input feeding
            x = torch.cat([x, state.feed], dim=-1)
        s, hidden = self.rnn(x, state.hidden)
        if self.placement == "after":
            context, weights = self.attention.attend(s, state.memory, need_weights)
        if self.combine is None or context is None:  # placement "none": o_t = s_t
            o = s
        else:
            o = torch.tanh(self.combine(torch.cat([s, context], dim=-1)))
        logits = self.out(self.dropout(o))
        return logits, DecoderState(hidden, o if self.input_feeding else None, state.memory), weights

    def step(
        self, y_prev: torch.Tensor, state: DecoderState, need_weights: bool = True
    ) -> tuple[torch.Tensor, DecoderState, torch.Tensor | None]:
        """One decoding step: y_prev [B] -> (logits [B, V], new state, weights [B, (H,) Tk] or None)."""
        logits, state, weights = self._advance(y_prev[:, None], state, need_weights)
        return logits[:, 0], state, None if weights is None else weights.squeeze(-2)

    def forward(
        self, enc: EncoderOutput, tgt_in: torch.Tensor, need_weights: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher forcing: tgt_in [B, U] -> (logits [B, U, V], weights [B, (H,) U, Tk] or None)."""
        if self.parallel:
            logits, _, weights = self._advance(tgt_in, self.init_state(enc), need_weights)
            return logits, weights
        return self._teacher_forced(enc, tgt_in, need_weights)

    def _teacher_forced(
        self, enc: EncoderOutput, tgt_in: torch.Tensor, need_weights: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`step` over a known target, doing per step only what depends on the recurrence.

        - The first layer's input gates are W_ih [e_t; c_t] + b_ih = (W_e e_t + b_ih) + W_c c_t: the
          embedding part is one matmul over all U steps before the loop, and only W_c c_t (c_t the
          context, or o_{t-1} under input feeding) runs per step.
        - The output layer, tanh(W_o[s_t; c_t]) and W_out, runs once after the loop unless input
          feeding needs o_t inside it.
        - Without weights to return, rows run longest first and each step only on the rows whose
          target goes on (input neither PAD nor EOS): a batch costs its tokens, not its padding. The
          logits of the other positions are 0; their targets are PAD, which the loss ignores.
        - Compiled (`_recurrence` a region, in training): every row runs every step, so that the
          shapes stay fixed (`_compiled`).

        Equal to the step loop (`step`) within float rounding (tests/unit/nn/test_decoders.py).
        """
        if self.training and not need_weights and is_compiled(self._recurrence):
            return self._compiled(enc, tgt_in)
        batch, width = tgt_in.shape
        steps = ((tgt_in != PAD) & (tgt_in != EOS)).sum(1)
        if need_weights:  # every position, as the step loop gives them
            steps = torch.full_like(steps, width)
        order = steps.argsort(descending=True, stable=True)
        enc = EncoderOutput(*(t.index_select(0, order) for t in enc))
        by_length = steps.index_select(0, order)
        active = (by_length[None] > torch.arange(width, device=steps.device)[:, None]).sum(1).tolist()
        state = self.init_state(enc)
        weights = self._weights()
        # unbind, not [:, t]: one backward node for all steps, where indexing's backward would
        # write each step's gradient into a zeroed copy of the whole [B, U, gates·H] tensor
        input_gates = self._input_gates(tgt_in.index_select(0, order), weights).unbind(1)
        layers = self._layer_states(state.hidden)
        feed: Any = state.feed
        memory, rows = state.memory, batch
        states: list[torch.Tensor] = []
        contexts: list[torch.Tensor] = []
        outputs: list[torch.Tensor] = []
        attention: list[torch.Tensor] = []
        for t, n in enumerate(active):
            if n < rows:  # rows are sorted longest first: the ones still going are a prefix
                rows, memory = n, first_rows(state.memory, n)
                layers, feed = first_rows(layers, n), first_rows(feed, n)
            if n == 0:
                break
            layers, s, context, feed, w = self._context_step(
                input_gates[t][:n], layers, feed, memory, weights, need_weights
            )
            states.append(s[:, 0])
            contexts.append(context[:, 0])
            if self.input_feeding:
                outputs.append(feed[:, 0])
            if w is not None:
                attention.append(w)
        o = self._output(torch.cat(states), torch.cat(contexts), torch.cat(outputs) if outputs else None)
        # o holds the active positions step by step; place them at (row in the batch, step)
        positions = torch.cat([order[:n] * width + t for t, n in enumerate(active) if n])
        logits = o.new_zeros(batch * width, self.vocab_size).index_copy(
            0, positions, self.out(self.dropout(o))
        )
        if not attention:
            return logits.view(batch, width, -1), None
        return logits.view(batch, width, -1), torch.cat(attention, dim=-2).index_select(0, order.argsort())

    def _compiled(self, enc: EncoderOutput, tgt_in: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The teacher-forced pass with the compiled `_recurrence`, on a target padded to `widest`
        (`Fusable`): padding steps come after every real one, which a recurrence never reads. Batch
        size and source length vary freely (Dynamo's dynamic shapes)."""
        width = tgt_in.size(1)
        state = self.init_state(enc)
        weights = self._weights()
        input_gates = self.pad_to_widest(self._input_gates(tgt_in, weights))
        o = self._recurrence(input_gates, self._layer_states(state.hidden), state.feed, state.memory, weights)
        logits = self.out(self.dropout(o[:, :width]))
        ended = (tgt_in == PAD) | (tgt_in == EOS)  # as the eager pass: 0 where the target has ended
        return logits.masked_fill(ended[..., None], 0.0), None

    def _recurrence(
        self, input_gates: torch.Tensor, layers: list[Any], feed: Any, memory: Any, weights: RNNWeights
    ) -> torch.Tensor:
        """Every step of `_context_step` over input gates [B, U, gates·H], all rows: o [B, U, H]. The
        region `compile: true` compiles (`fusable`): the cell, the mechanism and the output layer of
        all U steps in one graph, forward and backward."""
        states, contexts, outputs = [], [], []
        for gates in input_gates.unbind(1):
            layers, s, context, feed, _ = self._context_step(gates, layers, feed, memory, weights, False)
            states.append(s)
            contexts.append(context)
            if self.input_feeding:
                outputs.append(feed)
        o = self._output(
            torch.cat(states, 1), torch.cat(contexts, 1), torch.cat(outputs, 1) if outputs else None
        )
        return o

    def _context_step(
        self,
        gates: torch.Tensor,
        layers: list[Any],
        feed: Any,
        memory: Any,
        weights: RNNWeights,
        need_weights: bool,
    ) -> tuple[list[Any], torch.Tensor, torch.Tensor, Any, torch.Tensor | None]:
        """One step of a decoder that recurs through its context (placement "before", or "after" with
        input feeding) from the step's embedding gates [n, gates·H]: (layers, s_t [n, 1, H], c_t,
        o_t fed back or None, weights)."""
        # Only "before" and input-fed "after" recur through the context: both combine [s_t; c_t].
        assert self.combine is not None
        if self.placement == "before":
            top = layers[-1][0] if self.is_lstm else layers[-1]
            context, w = self.attention.attend(top[:, None], memory, need_weights)
            extra = context
        else:
            extra = feed
        layers = self._recur(gates + F.linear(extra[:, 0], weights.context), layers, weights)
        s = (layers[-1][0] if self.is_lstm else layers[-1])[:, None]
        if self.placement == "after":
            context, w = self.attention.attend(s, memory, need_weights)
            feed = torch.tanh(self.combine(torch.cat([s, context], dim=-1)))
        return layers, s, context, feed, w

    def _output(self, states: torch.Tensor, contexts: torch.Tensor, fed: torch.Tensor | None) -> torch.Tensor:
        """o_t = tanh(W_o[s_t; c_t]) for every step at once, unless input feeding computed it already."""
        assert self.combine is not None
        return fed if fed is not None else torch.tanh(self.combine(torch.cat([states, contexts], dim=-1)))

    def _weights(self) -> RNNWeights:
        """The RNN's parameters as tensors: a compiled region may not touch an `nn.GRU` (Dynamo refuses
        torch's RNN modules), and the first layer's W_ih splits into its embedding and context parts."""
        rnn, embed_dim = self.rnn, self.embed.embedding_dim
        layers = tuple(
            tuple(
                rnn.get_parameter(f"{name}_l{k}") for name in ("weight_ih", "bias_ih", "weight_hh", "bias_hh")
            )
            for k in range(self.num_layers)
        )
        w_ih = layers[0][0]
        return RNNWeights(w_ih[:, :embed_dim], w_ih[:, embed_dim:], layers)

    def _input_gates(self, tgt_in: torch.Tensor, weights: RNNWeights) -> torch.Tensor:
        """W_e e_t + b_ih for every step [B, U, gates·H]: the first layer's input gates, context aside."""
        return F.linear(self.dropout(self.embed(tgt_in)), weights.embedding, weights.layers[0][1])

    def _layer_states(self, hidden: Hidden) -> list[Any]:
        """[L, B, H] (or an LSTM's (h, c)) -> one entry per layer: h [B, H], or (h, c)."""
        if isinstance(hidden, tuple):
            return list(zip(hidden[0].unbind(0), hidden[1].unbind(0)))
        return list(hidden.unbind(0))

    def _recur(self, input_gates: torch.Tensor, layers: list[Any], weights: RNNWeights) -> list[Any]:
        """One step of the stacked cell from the first layer's input gates [B, gates·H]; upper layers
        take the layer below's h (dropped out between layers in training, as torch's RNNs do)."""
        new: list[Any] = []
        for k, previous in enumerate(layers):
            w_ih, b_ih, w_hh, b_hh = weights.layers[k]
            if k > 0:
                below = new[-1][0] if self.is_lstm else new[-1]
                input_gates = F.linear(F.dropout(below, self.layer_dropout, self.training), w_ih, b_ih)
            hidden_gates = F.linear(previous[0] if self.is_lstm else previous, w_hh, b_hh)
            new.append(cell_update(self.cell, input_gates, hidden_gates, previous))
        return new


class RNNWeights(NamedTuple):
    """An RNN decoder's parameters for its written-out steps: the first layer's W_ih split into its
    embedding and context columns, and every layer's (W_ih, b_ih, W_hh, b_hh)."""

    embedding: torch.Tensor
    context: torch.Tensor
    layers: tuple[tuple[torch.Tensor, ...], ...]


def first_rows(value: Any, n: int) -> Any:
    """The first n rows of every tensor in a (nested) tuple or list of batch-first tensors."""
    if isinstance(value, torch.Tensor):
        return value[:n]
    if isinstance(value, (tuple, list)):
        parts = [first_rows(v, n) for v in value]
        return type(value)(*parts) if hasattr(value, "_fields") else type(value)(parts)
    return value
