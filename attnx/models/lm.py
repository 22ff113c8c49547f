"""Decoder-only (causal) language model: the `lm` model kind, as GPT (Radford et al. 2018)."""

from __future__ import annotations

import torch
from torch import nn

from attnx.nn.attention import Mechanism
from attnx.nn.encoders import length_mask
from attnx.nn.positions import AbsolutePositions, Positions
from attnx.nn.transformer import SelfAttentionBlock
from attnx.vocab import PAD


class CausalLM(nn.Module):
    """p(x_{t+1} | x_≤t) = softmax(W · LN(h_t)), h = N pre-LN blocks of causal self-attention (any
    registered mechanism that declares `causal`: the run's `attention` and `score`) over x_t's embedding
    plus its absolute position encoding (`positions`: sinusoidal | learned | none, for relative scores).
    `ff_dim` = 0 (the default) makes the blocks attention-only, as Zoology's recall models."""

    def __init__(
        self,
        vocab_size: int,
        attention: Mechanism,
        d_model: int = 64,
        num_layers: int = 2,
        ff_dim: int = 0,
        dropout: float = 0.0,
        positions: str = "sinusoidal",
        max_len: int = 512,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=PAD)
        self.positions = AbsolutePositions(positions, max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            SelfAttentionBlock(d_model, attention, ff_dim, dropout, causal=True) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

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
