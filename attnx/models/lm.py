"""Decoder-only (causal) language model: the `lm` model kind, as GPT (Radford et al. 2018)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, cast

import torch
from torch import nn

from attnx.models.plan import per_layer
from attnx.nn.attention import Mechanism
from attnx.nn.encoders import length_mask
from attnx.nn.init import check_init, initialise
from attnx.nn.positions import AbsolutePositions, Positions
from attnx.nn.transformer import BlockState, SelfAttentionBlock
from attnx.vocab import PAD


class LMState(NamedTuple):
    """Cached decoding's state: each block's `BlockState` (its key/value cache and convolution state)
    and the number of tokens read, the position of the next."""

    blocks: tuple[BlockState, ...]
    length: int

    def select(self, index: torch.Tensor) -> LMState:
        """Reorder the batch: every tensor is batch-first."""
        return self._replace(blocks=tuple(block.select(index) for block in self.blocks))


class CausalLM(nn.Module):
    """p(x_{t+1} | x_≤t) = softmax(W · LN(h_t)), h = N pre-LN blocks of causal self-attention (any
    registered mechanism that declares `causal`: the run's `attention` and `score` in every block, or a
    plan's mechanism per block, its pattern repeated: `attnx.models.plan`) over x_t's embedding plus its
    absolute position encoding (`positions`: sinusoidal | learned | none, for relative scores).
    `ff_dim` = 0 (the default) makes the blocks attention-only, as Zoology's recall models; `ff` chooses
    the MLP (gelu, or swiglu as MAD's models); `conv` = k > 0 gives every block's mechanism a short
    causal convolution of kernel k on its input, as Zoology gives its sub-quadratic mixers. `init` starts
    the weights as PyTorch's modules do ("torch") or GPT-2's N(0, 0.02) ("normal", Zoology's;
    attnx.nn.init), and `tie_embeddings` reads the logits out through the embedding table.

    `prefill` then `step` decode token by token through each block's cache (`BlockState`), equal to
    `forward` over the whole sequence; a table of absolute positions bounds that at `max_len` tokens."""

    def __init__(
        self,
        vocab_size: int,
        attention: Mechanism | Sequence[Mechanism],
        d_model: int = 64,
        num_layers: int = 2,
        ff_dim: int = 0,
        ff: str = "gelu",
        dropout: float = 0.0,
        positions: str = "sinusoidal",
        max_len: int = 512,
        conv: int = 0,
        init: str = "torch",
        tie_embeddings: bool = False,
    ) -> None:
        super().__init__()
        check_init(init)
        if conv < 0:
            raise ValueError(f"conv must be 0 (none) or a kernel size >= 1; got conv={conv}")
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=PAD)
        self.positions = AbsolutePositions(positions, max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        pattern = [attention] if isinstance(attention, Mechanism) else list(attention)
        if not pattern or num_layers % len(pattern):
            raise ValueError(
                f"{len(pattern)} mechanisms for num_layers={num_layers}: one per block, or a pattern whose "
                "length divides num_layers"
            )
        self.blocks = nn.ModuleList(
            SelfAttentionBlock(d_model, mechanism, ff_dim, dropout, causal=True, ff=ff, conv=conv)
            for mechanism in per_layer(pattern, num_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=not tie_embeddings)
        initialise(self, init)
        if tie_embeddings:  # the read-out is the embedding table (GPT-2's, Zoology's): one matrix, no bias
            self.head.weight = self.embed.weight

    def forward(
        self, tokens: torch.Tensor, lengths: torch.Tensor, need_weights: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """tokens [B, T], lengths [B] -> (next-token logits [B, T, V], each layer's self-attention weights
        [B, (H,) T, T] when `need_weights`, else None)."""
        mask = length_mask(lengths, tokens.size(1))
        positions = Positions.self_attention(tokens.size(1), causal=True, device=tokens.device)
        x = self.dropout(self.positions(self.embed(tokens)))
        weights = []
        for block in self.blocks:
            x, w = block(x, mask, positions, need_weights)
            weights.append(w)
        return self.head(self.norm(x)), weights if need_weights else None

    def prefill(self, tokens: torch.Tensor) -> tuple[torch.Tensor, LMState]:
        """A prompt tokens [B, T] (no padding) in one causal pass -> (its next-token logits [B, T, V],
        the state after it)."""
        return self._decode(tokens, None)

    def step(self, token: torch.Tensor, state: LMState) -> tuple[torch.Tensor, LMState]:
        """The next token [B] at position `state.length` -> (logits [B, V] of the one after it, the state)."""
        logits, state = self._decode(token[:, None], state)
        return logits[:, 0], state

    def _decode(self, tokens: torch.Tensor, state: LMState | None) -> tuple[torch.Tensor, LMState]:
        """tokens [B, Tn] at positions state.length.. (0 without a state) through every block's cache."""
        start, width = (0 if state is None else state.length), tokens.size(1)
        table = self.positions
        if table.table is not None and start + width > table.max_len:
            raise ValueError(
                f"position {start + width - 1} is past lm.max_len={table.max_len}, the length of the "
                f"{table.kind} position table: an lm reads at most max_len tokens"
            )
        queries = Positions.span(width, tokens.device, start)
        positions = Positions(queries, Positions.span(start + width, tokens.device), causal=True)
        mask = torch.ones_like(tokens, dtype=torch.bool)
        x = self.dropout(table(self.embed(tokens), start=start))
        blocks = cast("list[SelfAttentionBlock]", list(self.blocks))  # a ModuleList's items are typed Module
        states = []
        for i, block in enumerate(blocks):
            x, block_state, _ = block.decode(x, mask, positions, None if state is None else state.blocks[i])
            states.append(block_state)
        return self.head(self.norm(x)), LMState(tuple(states), start + width)

    def state_size(self, n: int) -> int | None:
        """Numbers cached decoding keeps per sequence after n tokens: Σ over blocks of the site's cache
        (the mechanism's `state_size(n)`, plus the n keys a site re-prepares from when the mechanism is not
        incremental: `KVCache.state_size`) and the convolution's (k−1)·d_model; None when a mechanism
        declares none."""
        sizes = [cast(SelfAttentionBlock, block).state_size(n) for block in self.blocks]
        return None if any(size is None for size in sizes) else sum(cast("list[int]", sizes))

    def state_bytes(self, n: int) -> int | None:
        """`state_size(n)` in bytes: the numbers times the bytes of the parameters' dtype (Zoology's and
        MAD's state axis); None when a mechanism declares no state."""
        numbers = self.state_size(n)
        return None if numbers is None else numbers * next(self.parameters()).element_size()
