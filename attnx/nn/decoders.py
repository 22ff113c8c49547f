"""An RNN decoder that hosts any attention mechanism at the place its paper puts it.

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
from torch import nn

from attnx.nn.attention import PLACEMENTS, Attention
from attnx.nn.encoders import EncoderOutput, rnn_class
from attnx.vocab import PAD

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
        if isinstance(self.hidden, tuple):
            hidden = tuple(h.index_select(1, index) for h in self.hidden)
        else:
            hidden = self.hidden.index_select(1, index)
        feed = None if self.feed is None else self.feed.index_select(0, index)
        return self._replace(hidden=hidden, feed=feed)


class RNNDecoder(nn.Module):
    """Hosts `attention` by its placement (module docstring): `forward` teacher-forces a whole target,
    `init_state` + `step` decode one token at a time for greedy and beam search.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden_dim: int,
        enc_dim: int,
        attention: Attention,
        cell: str = "gru",
        num_layers: int = 1,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.placement = attention.placement
        if self.placement not in PLACEMENTS:
            raise ValueError(
                f"attention {type(attention).__name__} has placement={self.placement!r}; "
                f"a decoder supports {', '.join(PLACEMENTS)}"
            )
        self.attention = attention
        self.input_feeding = self.placement == "after" and bool(getattr(attention, "input_feeding", False))
        # Without a recurrence through the context, all U steps run as one RNN call.
        self.parallel = self.placement in ("none", "fixed_c") or (
            self.placement == "after" and not self.input_feeding
        )
        self.vocab_size, self.hidden_dim, self.num_layers = vocab_size, hidden_dim, num_layers
        self.is_lstm = cell == "lstm"
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
        elif self.input_feeding:
            x = torch.cat([x, state.feed], dim=-1)
        s, hidden = self.rnn(x, state.hidden)
        if self.placement == "after":
            context, weights = self.attention.attend(s, state.memory, need_weights)
        o = s if self.combine is None else torch.tanh(self.combine(torch.cat([s, context], dim=-1)))
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
        state = self.init_state(enc)
        if self.parallel:
            logits, _, weights = self._advance(tgt_in, state, need_weights)
            return logits, weights
        logits, weights = [], []
        for t in range(tgt_in.size(1)):
            logits_t, state, weights_t = self._advance(tgt_in[:, t : t + 1], state, need_weights)
            logits.append(logits_t)
            weights.append(weights_t)
        if weights[0] is None:
            return torch.cat(logits, dim=1), None
        return torch.cat(logits, dim=1), torch.cat(weights, dim=-2)
