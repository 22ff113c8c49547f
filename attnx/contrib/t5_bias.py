"""T5's relative position bias (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a
Unified Text-to-Text Transformer", §2.1; the buckets of the Mesh TensorFlow and T5 code).

    attnx train encoder=self_attn encoder/score=t5_bias encoder.positions=none \
        decoder=transformer decoder/score=t5_bias decoder.positions=none attention=multi_head score=t5_bias
"""

import math

import torch
from torch import nn

from attnx import Positions, Score, register_score, require_equal_dims


def relative_position_bucket(
    relative: torch.Tensor, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """T5's bucket of each relative position r = j − i (key minus query), as long integers.

    Bidirectional: half the buckets for r > 0, half for r ≤ 0; causal: all of them for r ≤ 0 (r > 0 is
    masked anyway and shares bucket 0). Within a sign, distances below half the buckets get one bucket
    each; larger ones share log-spaced buckets up to `max_distance`, and every farther one the last.
    """
    bucket = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (relative > 0).long() * num_buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp(min=0)
    exact = num_buckets // 2
    # clamp: log(0) would be -inf; those distances take the exact branch anyway
    scaled = torch.log(distance.clamp(min=1).float() / exact) / math.log(max_distance / exact)
    far = (exact + (scaled * (num_buckets - exact)).long()).clamp(max=num_buckets - 1)
    return bucket + torch.where(distance < exact, distance, far)


@register_score("t5_bias")
class T5BiasScore(Score):
    """f(q_i, k_j) = q_i·k_j / √d + b_h(bucket(j − i)): a learned scalar per (bucket, head) added to the
    logits (`relative_position_bucket`), bidirectional in encoders and cross-attention, causal buckets
    under a causal mask, as T5's encoder and decoder. Distances beyond `max_distance` share one bucket,
    so any length gets a bias, the same as the farthest ones seen in training.

    `scaled`: T5 itself does not divide by √d, because its Mesh TensorFlow initialisation folds 1/√d
    into W_q; attnx's projections keep PyTorch's default initialisation, so the default (True) divides
    here, as scaled_dot does, to keep the logits from saturating softmax at the start of training.
    The table starts at zero, as a fresh model with no position preference; its gradient is not zero.
    """

    uses_positions = True

    def __init__(
        self,
        query_dim: int,
        key_dim: int,
        num_heads: int = 1,
        num_buckets: int = 32,
        max_distance: int = 128,
        scaled: bool = True,
    ) -> None:
        super().__init__(query_dim, key_dim)
        require_equal_dims(self)
        if num_buckets < 4 or max_distance <= num_buckets // 2:
            # below that, some sign would have no exact bucket or no log-spaced range (log 1 = 0)
            raise ValueError(
                f"t5_bias needs num_buckets >= 4 and max_distance > num_buckets / 2, got "
                f"num_buckets={num_buckets}, max_distance={max_distance}"
            )
        self.num_heads, self.num_buckets, self.max_distance = num_heads, num_buckets, max_distance
        self.scale = 1 / math.sqrt(key_dim) if scaled else 1.0
        self.bias = nn.Embedding(num_buckets, num_heads)
        nn.init.zeros_(self.bias.weight)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, positions: Positions) -> torch.Tensor:
        if self.num_heads > 1 and (query.dim() < 4 or query.size(-3) != self.num_heads):
            raise ValueError(f"t5_bias has {self.num_heads} heads; queries must be [B, H, Tq, d]")
        buckets = relative_position_bucket(
            positions.relative(), not positions.causal, self.num_buckets, self.max_distance
        )
        bias = self.bias(buckets).movedim(-1, -3)  # [B|1, Tq, Tk, H] -> [B|1, H, Tq, Tk]
        if query.dim() == 3:
            bias = bias.squeeze(-3)  # one head
        else:
            bias = bias.view(bias.size(0), *[1] * (query.dim() - 4), *bias.shape[1:])
        return query @ keys.transpose(-1, -2) * self.scale + bias.to(query.dtype)
