"""Score functions f(q, k): raw relevance of every key to every query (no softmax, no mask).

Shapes are batch-first with any leading dims: query [..., Tq, Dq], keys [..., Tk, Dk] -> scores
[..., Tq, Tk]; multi-head attention calls a score on [B, H, T, d] tensors.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from attnx.nn.positions import Positions
from attnx.registry import init_parameters, register_score


class Score(nn.Module):
    """Base class of the `score` kind.

    `prepare(keys)` does the per-sequence key work once (e.g. U·k for additive scoring) so a
    decoder can call `forward` at every step without repeating it. Shapes are batch-first with
    any leading dims: query [..., Tq, Dq], keys [..., Tk, Dk] -> scores [..., Tq, Tk].

    A score that declares `uses_positions = True` is called as `forward(query, prepared, positions)`
    with the query and key `Positions` (relative biases, rotary embeddings); every other score as
    `forward(query, prepared)`. A constructor that takes `num_heads` receives the number of heads it
    is shared over (1 outside multi-head attention), for per-head parameters.
    """

    uses_positions: ClassVar[bool] = False
    inert: ClassVar[dict[str, str]] = {}  # hyperparameters it does not read itself, with why (as Attention's)

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__()
        self.query_dim = query_dim
        self.key_dim = key_dim

    def prepare(self, keys: torch.Tensor) -> Any:
        return keys

    def forward(self, query: torch.Tensor, prepared: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        """(query, prepared), and `positions` third for a score that uses them (the class docstring);
        the open tail lets either override the base for a type checker."""
        raise NotImplementedError

    def at(self, query: torch.Tensor, prepared: Any, positions: Positions | None) -> torch.Tensor:
        """Scores with positions for a score that uses them; the one call mechanisms make."""
        if not self.uses_positions:
            return self(query, prepared)
        if positions is None:
            raise ValueError(
                f"score {type(self).__name__} uses positions, and this attention site gives none "
                "(classifier pooling and the rnn decoder have no query positions)"
            )
        return self(query, prepared, positions)


ScoreFactory = Callable[..., Score]  # (query_dim, key_dim[, num_heads]) -> Score; a Score class is one


def build_score(factory: ScoreFactory, query_dim: int, key_dim: int, num_heads: int = 1) -> Score:
    """factory(query_dim, key_dim), passing num_heads when the factory takes it: a score class's own
    constructor, or one it passes `**kwargs` up to (a subclass that adds an argument)."""
    target = factory.func if isinstance(factory, partial) else factory
    if isinstance(target, type):
        takes_heads = any(p.name == "num_heads" for p in init_parameters(target))
    else:
        try:
            takes_heads = "num_heads" in inspect.signature(factory).parameters
        except (TypeError, ValueError):  # a builtin or C callable without a signature
            takes_heads = False
    return factory(query_dim, key_dim, num_heads=num_heads) if takes_heads else factory(query_dim, key_dim)


def require_equal_dims(score: Score) -> None:
    """Scores that compare q and k coordinate by coordinate need Dq == Dk."""
    if score.query_dim != score.key_dim:
        raise ValueError(
            f"{type(score).__name__} needs query_dim == key_dim, got query_dim={score.query_dim} and "
            f"key_dim={score.key_dim}; 'general' and 'additive' accept different dims"
        )


@register_score("dot")
class DotScore(Score):
    """f(q, k) = qᵀk — Luong et al. 2015, "Effective Approaches to Attention-based NMT" (dot)."""

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__(query_dim, key_dim)
        require_equal_dims(self)

    def forward(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        return query @ prepared.transpose(-1, -2)


@register_score("scaled_dot")
class ScaledDotScore(DotScore):
    """f(q, k) = qᵀk / √d — Vaswani et al. 2017, "Attention Is All You Need".

    The √d keeps the logits' variance at 1 for unit-variance q, k, so softmax does not saturate.
    """

    def forward(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        return super().forward(query, prepared) / math.sqrt(self.key_dim)


@register_score("general")
class GeneralScore(Score):
    """f(q, k) = qᵀ W k (bilinear) — Luong et al. 2015 ("general"); W k is prepared once."""

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__(query_dim, key_dim)
        # no bias: a bias in W k adds qᵀb to every key alike, which softmax ignores
        self.W = nn.Linear(key_dim, query_dim, bias=False)

    def prepare(self, keys: torch.Tensor) -> torch.Tensor:
        return self.W(keys)

    def forward(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        return query @ prepared.transpose(-1, -2)


@register_score("additive")
class AdditiveScore(Score):
    """f(q, k) = vᵀ tanh(W q + U k) — Bahdanau et al. 2015, "NMT by Jointly Learning to Align
    and Translate" (Luong's "concat"). U k is prepared once per sequence; `hidden_dim` is the
    size of the tanh layer (default: key_dim).
    """

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int | None = None) -> None:
        super().__init__(query_dim, key_dim)
        hidden_dim = hidden_dim or key_dim
        self.W = nn.Linear(query_dim, hidden_dim, bias=False)
        self.U = nn.Linear(key_dim, hidden_dim)
        self.v = nn.Linear(hidden_dim, 1, bias=False)

    def prepare(self, keys: torch.Tensor) -> torch.Tensor:
        return self.U(keys)

    def forward(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.W(query).unsqueeze(-2) + prepared.unsqueeze(-3))  # [..., Tq, Tk, H]
        return self.v(hidden).squeeze(-1)


@register_score("cosine")
class CosineScore(Score):
    """f(q, k) = cos(q, k) / τ = qᵀk / (‖q‖ ‖k‖ τ) — Graves et al. 2014, "Neural Turing Machines"
    (content addressing), with the temperature τ of Chen et al. 2020 (SimCLR). Scores lie in
    [-1/τ, 1/τ]; a small τ sharpens the softmax. `learn_temperature` learns log τ.
    """

    def __init__(
        self, query_dim: int, key_dim: int, temperature: float = 0.1, learn_temperature: bool = False
    ) -> None:
        super().__init__(query_dim, key_dim)
        require_equal_dims(self)
        if temperature <= 0:
            raise ValueError(f"score 'cosine' needs temperature > 0, got {temperature}")
        log_tau = torch.tensor(math.log(temperature))
        if learn_temperature:
            self.log_tau = nn.Parameter(log_tau)  # log keeps τ positive under any update
        else:
            self.register_buffer("log_tau", log_tau)

    def prepare(self, keys: torch.Tensor) -> torch.Tensor:
        return F.normalize(keys, dim=-1)

    def forward(self, query: torch.Tensor, prepared: torch.Tensor) -> torch.Tensor:
        return F.normalize(query, dim=-1) @ prepared.transpose(-1, -2) / self.log_tau.exp()
