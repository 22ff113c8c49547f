"""A complete attention mechanism as a plugin: multi-head softmax attention with its own projections
(Vaswani et al. 2017), written against attnx's plugin API alone. Copy it, rename it, change `attend`.

    head_h = Σ_j softmax_j(f(q W_h^Q, k_j W_h^K)) v_j W_h^V,   output = [head_1; ...; head_H] W^O

    ATTNX_PLUGIN_PATH=docs/recipes attnx plugins check my_attention
    ATTNX_PLUGIN_PATH=docs/recipes attnx train task=mqar attention=my_attention attention.num_heads=2
"""

import torch
from torch import nn

from attnx import Attention, Positions, ScoreFactory, masked_softmax, register_attention, score_state, visible


@register_attention("my_attention")
class MyAttention(Attention):
    default_score = "scaled_dot"  # f above: any registered score, chosen by `score=...`
    takes_positions = True  # attend takes positions= and passes them to the score
    causal = True  # it honours positions.causal: it can be a decoder's self-attention
    position_free = True  # nothing here sees where a token is (a score may)

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        value_dim: int,
        score: ScoreFactory | None = None,
        num_heads: int = 4,
        dropout: float = 0.0,
    ) -> None:
        super().__init__(query_dim, key_dim, value_dim, score)
        if num_heads < 1 or query_dim % num_heads:
            raise ValueError(
                f"my_attention needs num_heads to divide query_dim, got {num_heads} and {query_dim}"
            )
        self.num_heads, self.head_dim = num_heads, query_dim // num_heads
        self.W_q = nn.Linear(query_dim, query_dim, bias=False)
        self.W_k = nn.Linear(key_dim, query_dim, bias=False)
        self.W_v = nn.Linear(value_dim, query_dim, bias=False)
        self.W_o = nn.Linear(query_dim, query_dim)
        self.output_dim = query_dim
        self.score = self.make_score(score, self.head_dim, self.head_dim, num_heads)
        self.dropout = nn.Dropout(dropout)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, H·d] -> [B, H, T, d]"""
        return x.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)

    def prepare(self, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> tuple:
        """The keys' and values' work, once per sequence: a decoder then calls `attend` at every step."""
        padding = ~mask.unsqueeze(-1)  # padding may hold anything, NaN included: replace it, never multiply
        k = self.heads(self.W_k(keys.masked_fill(padding, 0)))
        v = self.heads(self.W_v(values.masked_fill(padding, 0)))
        return k, self.score.prepare(k), v, mask[:, None, None, :]

    def attend(
        self,
        query: torch.Tensor,
        prepared: tuple,
        need_weights: bool = True,
        positions: Positions | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        _, keys, values, mask = prepared
        q = self.heads(self.W_q(query))
        # the real keys, and under a causal mask only those at or before each query's position
        weights = masked_softmax(self.score.at(q, keys, positions), visible(mask, positions))
        context = (self.dropout(weights) @ values).transpose(1, 2).flatten(2)
        return self.W_o(context), weights if need_weights else None

    def state_size(self, n: int) -> int:
        """What decoding keeps per sequence after n tokens: a decoder re-prepares its cached inputs (this
        mechanism is not `incremental`), and `prepare` keeps K W^K and V W^V beside them, and whatever the
        score's own `prepare` adds."""
        keys = self.W_k.weight.new_zeros(1, self.num_heads, n, self.head_dim)
        return 2 * n * self.query_dim + score_state(self.score, keys)
