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
from attnx.nn.decoders.base import Decoder
from attnx.nn.encoders import EncoderOutput, rnn_class
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
class RNNDecoder(Decoder):
    """Hosts `cross_attention` by its placement (module docstring): `forward` teacher-forces a whole
    target, `init_state` + `step` decode one token at a time for greedy and beam search. Scored
    mechanisms attend in the decoder's space (hidden_dim); none/fixed_c read C as the encoder gives it.
    """

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
        self.rnn = rnn_class(cell)(
            embed_dim + extra_input,
            hidden_dim,
            num_layers,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
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

        Equal to the step loop (`step`) within float rounding (tests/unit/nn/test_decoders.py).
        """
        # Only "before" and input-fed "after" recur through the context: both combine [s_t; c_t].
        assert self.combine is not None
        batch, width = tgt_in.shape
        steps = ((tgt_in != PAD) & (tgt_in != EOS)).sum(1)
        if need_weights:  # every position, as the step loop gives them
            steps = torch.full_like(steps, width)
        order = steps.argsort(descending=True, stable=True)
        enc = EncoderOutput(*(t.index_select(0, order) for t in enc))
        by_length = steps.index_select(0, order)
        active = (by_length[None] > torch.arange(width, device=steps.device)[:, None]).sum(1).tolist()
        state = self.init_state(enc)
        x = self.dropout(self.embed(tgt_in.index_select(0, order)))
        embed_dim = x.size(-1)
        w_ih, b_ih = self.rnn.get_parameter("weight_ih_l0"), self.rnn.get_parameter("bias_ih_l0")
        # unbind, not [:, t]: one backward node for all steps, where indexing's backward would
        # write each step's gradient into a zeroed copy of the whole [B, U, gates·H] tensor
        input_gates = F.linear(x, w_ih[:, :embed_dim], b_ih).unbind(1)
        w_extra = w_ih[:, embed_dim:]
        layers = self._layer_states(state.hidden)
        feed: Any = state.feed
        memory, rows = state.memory, batch
        states: list[torch.Tensor] = []
        contexts: list[torch.Tensor] = []
        outputs: list[torch.Tensor] = []
        weights: list[torch.Tensor] = []
        for t, n in enumerate(active):
            if n < rows:  # rows are sorted longest first: the ones still going are a prefix
                rows, memory = n, first_rows(state.memory, n)
                layers, feed = first_rows(layers, n), first_rows(feed, n)
            if n == 0:
                break
            if self.placement == "before":
                top = layers[-1][0] if self.is_lstm else layers[-1]
                context, w = self.attention.attend(top[:, None], memory, need_weights)
                extra = context
            else:
                extra = feed
            layers = self._recur(input_gates[t][:n] + F.linear(extra[:, 0], w_extra), layers)
            s = (layers[-1][0] if self.is_lstm else layers[-1])[:, None]
            if self.placement == "after":
                context, w = self.attention.attend(s, memory, need_weights)
                feed = torch.tanh(self.combine(torch.cat([s, context], dim=-1)))
                outputs.append(feed[:, 0])
            states.append(s[:, 0])
            contexts.append(context[:, 0])
            if w is not None:
                weights.append(w)
        if outputs:
            o = torch.cat(outputs)
        else:
            o = torch.tanh(self.combine(torch.cat([torch.cat(states), torch.cat(contexts)], dim=-1)))
        # o holds the active positions step by step; place them at (row in the batch, step)
        positions = torch.cat([order[:n] * width + t for t, n in enumerate(active) if n])
        logits = o.new_zeros(batch * width, self.vocab_size).index_copy(
            0, positions, self.out(self.dropout(o))
        )
        if not weights:
            return logits.view(batch, width, -1), None
        return logits.view(batch, width, -1), torch.cat(weights, dim=-2).index_select(0, order.argsort())

    def _layer_states(self, hidden: Hidden) -> list[Any]:
        """[L, B, H] (or an LSTM's (h, c)) -> one entry per layer: h [B, H], or (h, c)."""
        if isinstance(hidden, tuple):
            return list(zip(hidden[0].unbind(0), hidden[1].unbind(0)))
        return list(hidden.unbind(0))

    def _recur(self, input_gates: torch.Tensor, layers: list[Any]) -> list[Any]:
        """One step of the stacked cell from the first layer's input gates [B, gates·H]; upper layers
        take the layer below's h (dropped out between layers in training, as torch's RNNs do)."""
        new: list[Any] = []
        for k, previous in enumerate(layers):
            if k > 0:
                below = new[-1][0] if self.is_lstm else new[-1]
                below = F.dropout(below, self.rnn.dropout, self.training)
                input_gates = F.linear(
                    below, self.rnn.get_parameter(f"weight_ih_l{k}"), self.rnn.get_parameter(f"bias_ih_l{k}")
                )
            hidden_gates = F.linear(
                previous[0] if self.is_lstm else previous,
                self.rnn.get_parameter(f"weight_hh_l{k}"),
                self.rnn.get_parameter(f"bias_hh_l{k}"),
            )
            new.append(cell_update(self.cell, input_gates, hidden_gates, previous))
        return new


def cell_update(cell: str, gi: torch.Tensor, gh: torch.Tensor, previous: Any) -> Any:
    """A recurrent cell's new state from its input gates gi = W_i x + b_i and hidden gates
    gh = W_h h + b_h, in torch's gate order:

      gru   r = σ(gi_r + gh_r), z = σ(gi_z + gh_z), n = tanh(gi_n + r ⊙ gh_n), h' = (1 − z) ⊙ n + z ⊙ h
      lstm  i, f, g, o = σ, σ, tanh, σ of (gi + gh); c' = f ⊙ c + i ⊙ g, h' = o ⊙ tanh(c')
      rnn   h' = tanh(gi + gh)
    """
    if cell == "gru":
        i_r, i_z, i_n = gi.chunk(3, dim=-1)
        h_r, h_z, h_n = gh.chunk(3, dim=-1)
        r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return n + z * (previous - n)
    if cell == "lstm":
        i, f, g, o = (gi + gh).chunk(4, dim=-1)
        c = torch.sigmoid(f) * previous[1] + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c
    return torch.tanh(gi + gh)


def first_rows(value: Any, n: int) -> Any:
    """The first n rows of every tensor in a (nested) tuple or list of batch-first tensors."""
    if isinstance(value, torch.Tensor):
        return value[:n]
    if isinstance(value, (tuple, list)):
        parts = [first_rows(v, n) for v in value]
        return type(value)(*parts) if hasattr(value, "_fields") else type(value)(parts)
    return value
