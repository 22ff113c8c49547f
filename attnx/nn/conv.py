"""Short causal depthwise convolution (Zoology: Arora et al. 2024, "Zoology: Measuring and Improving
Recall in Efficient Language Models"; its ShortConvolution, `zoology/mixers/convolution.py`).

    y_t = Σ_{i<k} w_i ⊙ x_{t−i}        (x_{t−i} = 0 before the sequence starts)

w_0..w_{k−1} ∈ R^D, one filter per channel: each output mixes the last k inputs, never a later one.
Zoology gives every sub-quadratic mixer one "for fair comparison": its attention, Based and sliding-window
models (`experiments/paper_configs/arxiv24_based_figure2/configs.py`) interleave a BaseConv layer of
kernel 3 with the mixer (`mixers/hybrid.py`: layer i takes config i mod 2; BaseConv is conv(u) ⊙ W u + u),
and its DeltaNet mixers convolve q, k and v with kernel 4 (`conv_size`) after their projections. attnx's
`lm.conv` applies it inside every block, to the mechanism's normed input, x += Attn(Conv(LN(x)))
(`attnx.nn.transformer.SelfAttentionBlock`): one convolution before the projections, shared by queries,
keys and values, so any mechanism gets it. It lets one layer read a token's predecessor, which recall
needs (an induction head's previous-token step).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ShortConvolution(nn.Module):
    """y_t = Σ_{i<k} w_i ⊙ x_{t−i} over x [B, T, D]. Decoding carries the state: the last k−1 inputs
    [B, k−1, D] (zeros before the start), so a chunk continued from a state equals the whole sequence."""

    def __init__(self, dim: int, kernel_size: int) -> None:
        super().__init__()
        if kernel_size < 1:
            raise ValueError(f"a short convolution's kernel size must be >= 1, got {kernel_size}")
        self.dim, self.kernel_size = dim, kernel_size
        # conv1d's layout [D, 1, k]: weight[:, 0, k−1−i] is w_i (conv1d correlates, so the last tap is x_t)
        # the identity (w_0 = 1, the other taps 0): the block starts as the block without it, as Zoology's
        # BaseConv passes its input through (conv(u) ⊙ W u + u). nn.Conv1d's random taps replace the token by
        # a per-channel blend of its predecessors: on MQAR (benchmarks/zoology_based.py) linear attention then
        # lost nearly all it had learnt in an epoch
        self.weight = nn.Parameter(torch.zeros(dim, 1, kernel_size))
        with torch.no_grad():
            self.weight[:, 0, -1] = 1.0

    def initial_state(self, x: torch.Tensor) -> torch.Tensor:
        """The state before the first token: k−1 zero inputs [B, k−1, D], as x's batch, dtype, device."""
        return x.new_zeros(x.size(0), self.kernel_size - 1, self.dim)

    def forward(
        self, x: torch.Tensor, state: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, D] following `state` (None: the sequence's start) -> (y [B, T, D], the state after x)."""
        past = torch.cat([self.initial_state(x) if state is None else state, x], dim=1)  # [B, k−1+T, D]
        y = F.conv1d(past.transpose(1, 2), self.weight, groups=self.dim).transpose(1, 2)
        return y, past[:, past.size(1) - (self.kernel_size - 1) :]

    def state_size(self) -> int:
        """Numbers the decoding state holds per sequence: the last k−1 inputs."""
        return (self.kernel_size - 1) * self.dim
