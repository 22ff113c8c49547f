"""Decoders (kind "decoder"): an RNN decoder that hosts any attention mechanism at the place its
paper puts it, and a Transformer decoder whose self- and cross-attention host any mechanism.

The RNN decoder:

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

from typing import Any, ClassVar, NamedTuple, Protocol

import torch
from torch import nn

from attnx.nn.attention import PLACEMENTS, Mechanism
from attnx.nn.encoders import EncoderOutput, default_mechanism, rnn_class
from attnx.nn.positions import AbsolutePositions, Positions
from attnx.nn.transformer import DecoderBlock, KVCache
from attnx.registry import Slot, register_decoder
from attnx.vocab import PAD

Hidden = torch.Tensor | tuple[torch.Tensor, torch.Tensor]  # [L, B, H], or (h, c) for an LSTM


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


class TransformerState(NamedTuple):
    """Decoding state: each layer's self-attention cache and prepared cross-attention memory, the
    number of tokens decoded, and the source positions."""

    caches: tuple[KVCache, ...]
    memory: tuple[Any, ...]
    length: int
    source: torch.Tensor  # [1, S] positions of the memory's keys

    def select(self, index: torch.Tensor) -> TransformerState:
        return self._replace(caches=tuple(cache.select(index) for cache in self.caches))


@register_decoder("transformer")
class TransformerDecoder(Decoder):
    """Transformer decoder (Vaswani et al. 2017) of pre-LN blocks: causal self-attention (the slot
    `attention`, any mechanism that declares `causal`), cross-attention over the encoder states (the
    run's `attention`/`score`), feed-forward; logits = W LN(x_L). Encoder states are projected to
    d_model when their width differs.

    Teacher forcing runs every target position in one pass under a causal mask. Decoding keeps a
    key/value cache per layer (`KVCache`), so each step runs every layer on the new token only. The
    returned weights are the last layer's cross-attention; `record_weights = True` also keeps every
    layer's self- and cross-attention weights of the last `forward` in `attention_weights`
    ({"self": [...], "cross": [...]}, [B, (H,) U, ·] per layer).
    """

    slots: ClassVar[dict[str, Slot]] = {"attention": Slot(default="multi_head", role="causal")}
    cross_positions: ClassVar[bool] = True

    def __init__(
        self,
        vocab_size: int,
        enc_dim: int,
        cross_attention: Mechanism,
        d_model: int = 64,
        num_layers: int = 2,
        ff_dim: int = 128,
        dropout: float = 0.1,
        positions: str = "sinusoidal",
        max_len: int = 512,
        attention: Mechanism | None = None,
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=PAD)
        self.positions = AbsolutePositions(positions, max_len, d_model)
        self.project = None if enc_dim == d_model else nn.Linear(enc_dim, d_model, bias=False)
        self_attention = attention or default_mechanism(self.slots["attention"])
        self.blocks = nn.ModuleList(
            DecoderBlock(d_model, self_attention, cross_attention, ff_dim, dropout) for _ in range(num_layers)
        )
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, vocab_size)
        self.record_weights = False
        self.attention_weights: dict[str, list[torch.Tensor | None]] = {}

    def init_state(self, enc: EncoderOutput) -> TransformerState:
        """Each layer's cross-attention memory, prepared once per sequence; empty caches."""
        states = enc.states if self.project is None else self.project(enc.states)
        memory = tuple(block.cross_attention.prepare(states, enc.mask) for block in self.blocks)
        source = Positions.span(enc.mask.size(1), enc.mask.device)
        return TransformerState((), memory, 0, source)

    def _run(
        self, tokens: torch.Tensor, state: TransformerState, need_weights: bool
    ) -> tuple[torch.Tensor, TransformerState, list[torch.Tensor | None], list[torch.Tensor | None]]:
        """tokens [B, Tn] at positions state.length.. -> (logits [B, Tn, V], state, weights per layer)."""
        start, width = state.length, tokens.size(1)
        x = self.dropout(self.positions(self.embed(tokens), start=start))
        queries = Positions.span(width, tokens.device, start)
        positions = (
            Positions(queries, Positions.span(start + width, tokens.device), causal=True),
            Positions(queries, state.source),
        )
        mask = tokens != PAD  # a finished row's PAD steps are keys of no later query, cached or not
        caches, self_weights, cross_weights = [], [], []
        for i, block in enumerate(self.blocks):
            cache = state.caches[i] if state.caches else None
            x, cache, w_self, w_cross = block(x, mask, cache, state.memory[i], positions, need_weights)
            caches.append(cache)
            self_weights.append(w_self)
            cross_weights.append(w_cross)
        logits = self.out(self.norm(x))
        return logits, state._replace(caches=tuple(caches), length=start + width), self_weights, cross_weights

    def step(
        self, y_prev: torch.Tensor, state: TransformerState, need_weights: bool = True
    ) -> tuple[torch.Tensor, TransformerState, torch.Tensor | None]:
        logits, state, _, cross = self._run(y_prev[:, None], state, need_weights)
        return logits[:, 0], state, None if cross[-1] is None else cross[-1].squeeze(-2)

    def forward(
        self, enc: EncoderOutput, tgt_in: torch.Tensor, need_weights: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        record = need_weights or self.record_weights
        logits, _, self_weights, cross_weights = self._run(tgt_in, self.init_state(enc), record)
        self.attention_weights = {"self": self_weights, "cross": cross_weights} if self.record_weights else {}
        return logits, cross_weights[-1] if need_weights else None
