"""The Transformer decoder (registered as "transformer"): pre-LN blocks whose causal self-attention
and cross-attention each host any mechanism that can serve the role.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple, cast

import torch
from torch import nn

from attnx.nn.attention import Mechanism
from attnx.nn.decoders.base import Decoder
from attnx.nn.encoders import EncoderOutput, default_mechanism
from attnx.nn.positions import AbsolutePositions, Positions
from attnx.nn.transformer import DecoderBlock, KVCache
from attnx.registry import Slot, register_decoder
from attnx.vocab import PAD


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
        blocks = cast("list[DecoderBlock]", list(self.blocks))  # a ModuleList's items are typed Module
        memory = tuple(block.cross_attention.prepare(states, enc.mask) for block in blocks)
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
