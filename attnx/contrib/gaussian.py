"""Example plugin: a Gaussian (RBF) distance score. Copy this file to start your own score
(and give it a name of its own: two plugins may not register the same name).

attnx train score=gaussian score.bandwidth=0.5 score.learn_bandwidth=true
"""

import math

import torch
from torch import nn

from attnx import Score, register_score, require_equal_dims


@register_score("gaussian")
class GaussianScore(Score):
    """f(q, k) = -‖q − k‖² / (2σ²): the log of an RBF kernel, so softmax(f) is a Nadaraya–Watson
    kernel smoother (Nadaraya 1964; Watson 1964) and nearby keys win. σ = `bandwidth`;
    `learn_bandwidth` learns log σ.
    """

    def __init__(
        self, query_dim: int, key_dim: int, bandwidth: float = 1.0, learn_bandwidth: bool = False
    ) -> None:
        super().__init__(query_dim, key_dim)
        require_equal_dims(self)
        log_sigma = torch.tensor(math.log(bandwidth))
        if learn_bandwidth:
            self.log_sigma = nn.Parameter(log_sigma)  # log keeps σ positive
        else:
            self.register_buffer("log_sigma", log_sigma)

    def prepare(self, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return keys, keys.pow(2).sum(-1).unsqueeze(-2)  # ‖k‖² once per sequence

    def forward(self, query: torch.Tensor, prepared: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        keys, k2 = prepared
        # ‖q − k‖² = ‖q‖² − 2qᵀk + ‖k‖²: a matmul instead of a [.., Tq, Tk, D] difference tensor
        sq = query.pow(2).sum(-1, keepdim=True) - 2 * query @ keys.transpose(-1, -2) + k2
        return -sq / (2 * (2 * self.log_sigma).exp())
