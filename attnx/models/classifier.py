"""Sequence classifier: encoder, pooling by the attention mechanism, linear head."""

from __future__ import annotations

import torch
from torch import nn

from attnx.nn.attention import Attention
from attnx.nn.encoders import Encoder


class Classifier(nn.Module):
    """p(y | x) = softmax(W · dropout(c)), c = attention(q, K, V, mask) over the encoder states.

    q is a learned query that "describes what we look for" (attention pooling, as in Yang et al.
    2016); the mechanism decides what pooling means: `none` averages, `fixed_c` returns the
    encoder summary C, `multi_head` projects q once per head.
    """

    def __init__(
        self, encoder: Encoder, attention: Attention, num_classes: int, dropout: float = 0.1
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.attention = attention
        query = torch.randn(1, 1, encoder.output_dim) * encoder.output_dim**-0.5
        if attention.placement in ("none", "fixed_c"):
            # These pool without a query; a buffer keeps it out of the optimiser and DDP's unused check.
            self.register_buffer("query", query, persistent=False)
        else:
            self.query = nn.Parameter(query)
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(attention.output_dim, num_classes))

    def forward(
        self, tokens: torch.Tensor, lengths: torch.Tensor, need_weights: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """tokens [B, T], lengths [B] -> (logits [B, C], pooling weights [B, (H,) T] or None)."""
        enc = self.encoder(tokens, lengths)
        keys, values, mask = self.attention.memory(*enc)
        query = self.query.expand(tokens.size(0), -1, -1)
        context, weights = self.attention(query, keys, values, mask, need_weights=need_weights)
        return self.head(context[:, 0]), None if weights is None else weights.squeeze(-2)
