"""The conformance kit's inputs: what is checked (a `Subject`), the settings it is called in (`Case`s,
small random float64 tensors from fixed seeds), and the helpers that call a mechanism on a case and
compare its outputs over the real queries."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from attnx.nn.attention import Attention
from attnx.nn.positions import Positions
from attnx.nn.scores import Score, ScoreFactory

LENGTHS = (5, 3, 1)  # valid tokens per sequence; the last has a single valid key
B = len(LENGTHS)
TK = max(LENGTHS)  # keys per sequence, padding included
DIMS = ((8, 6, 5), (8, 8, 5))  # cross-attention (query, key, value); the second when Dq == Dk is needed
SELF_DIM = 8  # self-attention's one width (divisible by multi_head's default 4 heads)
EXTRA = 3  # padding the padding check adds


# ---------------------------------------------------------------------------------------------
# What is checked: a subject, and the settings (cases) it is called in


@dataclass
class Subject:
    """A mechanism class with its score and hyperparameters: what every check examines. A score
    checked alone is the score inside `SoftmaxAttention` (`score_cls` set)."""

    cls: type[Attention]
    score: ScoreFactory | None
    hyperparams: dict[str, Any]
    label: str
    uses_positions: bool = False
    score_cls: type[Score] | None = None
    score_hyperparams: dict[str, Any] = field(default_factory=dict)
    _built: dict[tuple, tuple[Attention, tuple[int, int, int]]] = field(default_factory=dict, repr=False)

    def make(self, query_dim: int, key_dim: int, value_dim: int) -> Attention:
        return self.cls(query_dim, key_dim, value_dim, self.score, **self.hyperparams)

    def build(self, options: tuple[tuple[int, int, int], ...]) -> tuple[Attention, tuple[int, int, int]]:
        """The mechanism for the first dims it accepts (built once per subject, in float64 eval mode)."""
        if options not in self._built:
            self._built[options] = construct(self.make, options)
        return self._built[options]


@dataclass(frozen=True)
class Case:
    """One call's inputs in a setting the mechanism declares: cross-attention (queries apart from the
    keys) or self-attention (query = keys = values = `query`, padded like the keys). `real` [B, Tq]
    marks the queries whose outputs the contract constrains."""

    name: str
    query: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor
    mask: torch.Tensor
    real: torch.Tensor
    positions: Positions | None
    self_attention: bool = False

    @property
    def tq(self) -> int:
        return self.query.size(1)

    def rows(self, index: torch.Tensor) -> Case:
        """These sequences of the batch only (positions are shared by the batch)."""
        pick = partial(torch.index_select, dim=0, index=index)
        return dataclasses.replace(
            self,
            query=pick(self.query),
            keys=pick(self.keys),
            values=pick(self.values),
            mask=pick(self.mask),
            real=pick(self.real),
        )


def cross_case(dims: tuple[int, int, int], tq: int, positions: bool) -> Case:
    """Tq queries attending to TK keys, padded to LENGTHS; queries at 0..Tq-1 and keys at 0..TK-1."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, t, d, generator=g, dtype=torch.float64) for t, d in zip((tq, TK, TK), dims))
    at = Positions(Positions.span(tq), Positions.span(TK)) if positions else None
    real = torch.ones(B, tq, dtype=torch.bool)
    return Case(f"cross-attention, Tq={tq}", q, k, v, key_mask(), real, at)


def self_case(x: torch.Tensor, mask: torch.Tensor, causal: bool, positions: bool) -> Case:
    """x [B, T, D] attending to itself; positions when asked for, and always when causal."""
    at = Positions.self_attention(x.size(1), causal) if positions or causal else None
    name = f"self-attention{', causal' if causal else ''}, T={x.size(1)}"
    return Case(name, x, x, x, mask, mask, at, self_attention=True)


def key_mask() -> torch.Tensor:
    """[B, TK], True at the LENGTHS valid tokens of each sequence."""
    return torch.arange(TK) < torch.tensor(LENGTHS)[:, None]


def random_sequence(seed: int = 3) -> torch.Tensor:
    """[B, TK, SELF_DIM] random tokens for self-attention."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, TK, SELF_DIM, generator=g, dtype=torch.float64)


def cases_for(subject: Subject) -> list[tuple[Attention, Case]]:
    """(mechanism, inputs) for every setting the flags allow: cross-attention for Tq = 1 and 3,
    self-attention, and causal self-attention."""
    cls, out = subject.cls, []
    if cls.cross_attention:
        att, dims = subject.build(DIMS)
        out += [(att, cross_case(dims, tq, cls.takes_positions)) for tq in (1, 3)]
    if cls.self_attention:
        att, _ = subject.build(((SELF_DIM,) * 3,))
        out.append((att, self_case(random_sequence(), key_mask(), False, cls.takes_positions)))
        if cls.causal:
            out.append((att, self_case(random_sequence(), key_mask(), True, cls.takes_positions)))
    return out


def padded(case: Case, fill: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Case:
    """`case` with `fill(x, pad)` applied to its padded keys/values (and queries in self-attention);
    pad [B, T, 1] is True at padding."""
    pad = ~case.mask.unsqueeze(-1)
    if case.self_attention:
        x = fill(case.query, pad)
        return dataclasses.replace(case, query=x, keys=x, values=x)
    return dataclasses.replace(case, keys=fill(case.keys, pad), values=fill(case.values, pad))


def noise(x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    """x with large random changes at the padding (pad True)."""
    g = torch.Generator().manual_seed(1)
    return x + pad * 100 * torch.randn(x.shape, generator=g, dtype=x.dtype)


def extended(case: Case) -> Case:
    """`case` padded EXTRA positions further: random inputs there, masked."""
    g = torch.Generator().manual_seed(4)
    more = partial(torch.randn, generator=g, dtype=torch.float64)
    mask = F.pad(case.mask, (0, EXTRA), value=False)
    if case.self_attention:
        x = torch.cat([case.query, more(B, EXTRA, case.query.size(-1))], dim=1)
        causal = case.positions is not None and case.positions.causal
        return self_case(x, mask, causal, case.positions is not None)
    keys = torch.cat([case.keys, more(B, EXTRA, case.keys.size(-1))], dim=1)
    values = torch.cat([case.values, more(B, EXTRA, case.values.size(-1))], dim=1)
    at = None if case.positions is None else Positions(case.positions.query, Positions.span(keys.size(1)))
    return dataclasses.replace(case, keys=keys, values=values, mask=mask, positions=at)


# ---------------------------------------------------------------------------------------------
# Building, calling and comparing


def construct(
    make: Callable[[int, int, int], Any], options: tuple[tuple[int, int, int], ...]
) -> tuple[Any, tuple]:
    """make(*dims) in float64 eval mode from seed 0, for the first dims it accepts (a ValueError refuses)."""
    for dims in options:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            try:
                return make(*dims).double().eval(), dims
            except ValueError as error:
                refusal = error
            except Exception as error:
                raise AssertionError(f"construction failed: {type(error).__name__}: {error}") from error
    raise AssertionError(
        f"construction failed for (query, key, value) dims {', '.join(map(str, options))}: {refusal}"
    )


def call(att: Attention, case: Case, need_weights: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """forward on the case's inputs, with its positions when it has them; a crash names the case."""
    at = {} if case.positions is None else {"positions": case.positions}
    try:
        return att(case.query, case.keys, case.values, case.mask, need_weights=need_weights, **at)
    except Exception as error:
        raise AssertionError(f"({case.name}): forward failed: {type(error).__name__}: {error}") from error


def real_rows(x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """The real queries' rows: a context [B, Tq, D] -> [N, D]; weights [B, ..., Tq, Tk] -> [N, ..., Tk]."""
    return x.movedim(-2, 1)[real]


def select(x: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor | None:
    return None if x is None else x.index_select(0, index)


def max_gap(a: Any, b: Any, real: torch.Tensor) -> float:
    """Max |a − b| over the real queries' rows of (context, weights) pairs or single tensors; inf when the
    shapes (or the presence of weights) differ."""
    a, b = (x if isinstance(x, tuple) else (x,) for x in (a, b))
    gap = 0.0
    for x, y in zip(a, b):
        if x is None or y is None:
            if (x is None) != (y is None):
                return math.inf
            continue
        if x.shape != y.shape:
            return math.inf
        if real.any():
            gap = max(gap, (real_rows(x, real) - real_rows(y, real)).abs().max().item())
    return gap


def all_finite(outputs: Iterable[torch.Tensor | None], real: torch.Tensor) -> bool:
    return all(x is None or torch.isfinite(real_rows(x, real)).all() for x in outputs)


def masked_keys(mask: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """~mask [B, Tk] shaped to broadcast over weights [B, ..., Tq, Tk]: True at masked keys."""
    return ~mask.view(mask.size(0), *[1] * (w.dim() - 2), mask.size(1))


def with_grad(case: Case) -> tuple[Case, dict[str, torch.Tensor]]:
    """The case with fresh leaf inputs that require grad, and those inputs by name."""
    if case.self_attention:
        x = case.query.detach().clone().requires_grad_()
        return dataclasses.replace(case, query=x, keys=x, values=x), {"inputs": x}
    q, k, v = (t.detach().clone().requires_grad_() for t in (case.query, case.keys, case.values))
    return dataclasses.replace(case, query=q, keys=k, values=v), {"query": q, "keys": k, "values": v}


def projection_loss(*outputs: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """A scalar whose gradient reaches every element of `outputs`: each output dotted with a fixed
    random tensor. `outputs.sum()` is no such loss after a normalisation (a fresh LayerNorm's outputs
    and softmax weights sum to a constant), so its gradient is zero up to rounding."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack(
        [(x * torch.randn(x.shape, generator=g, dtype=x.dtype).to(x.device)).sum() for x in outputs]
    ).sum()
