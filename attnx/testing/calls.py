"""Building a mechanism for the kit, calling it on a case, and comparing what calls return over the real
queries: the helpers every check shares."""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from attnx.nn.attention import Attention
    from attnx.testing.cases import Case

TRAIN_SEED = 11  # a train-mode call's random numbers (`call`)


def construct(
    make: Callable[[int, int, int], Any], options: tuple[tuple[int, int, int], ...]
) -> tuple[Any, tuple]:
    """make(*dims) in float64 eval mode from seed 0, for the first dims it accepts (a ValueError refuses)."""
    for dims in options:
        with seeded(0):
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
    """forward on the case's inputs (`raw_call`), in train mode from a fixed seed, so that two calls on the
    same inputs draw the same numbers (the `purity` check says whether any are drawn with every nn.Dropout
    at p = 0)."""
    with seeded(TRAIN_SEED, att.training):
        return raw_call(att, case, need_weights)


def raw_call(
    att: Attention, case: Case, need_weights: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """forward on the case's inputs, with its positions when it has them; a crash names the call. Gradients
    are recorded as training records them: in train mode, or for inputs that require them (the gradient
    checks'); an eval-mode call runs without, as validation and decoding do."""
    at = {} if case.positions is None else {"positions": case.positions}
    recorded = att.training or any(x.requires_grad for x in (case.query, case.keys, case.values))
    try:
        with torch.set_grad_enabled(recorded):
            return att(case.query, case.keys, case.values, case.mask, need_weights=need_weights, **at)
    except Exception as error:
        raise AssertionError(
            f"({case.where(need_weights)}): forward failed: {type(error).__name__}: {error}"
        ) from error


@contextlib.contextmanager
def seeded(seed: int, enabled: bool = True) -> Iterator[None]:
    """torch's CPU generator at `seed` inside, as it was after (when `enabled`). Its state for each seed is
    made once: `manual_seed` costs as much as a call of a small mechanism."""
    if not enabled:
        yield
        return
    if seed not in _SEEDED:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            _SEEDED[seed] = torch.get_rng_state()
    outside = torch.get_rng_state()
    torch.set_rng_state(_SEEDED[seed])
    try:
        yield
    finally:
        torch.set_rng_state(outside)


_SEEDED: dict[int, torch.Tensor] = {}  # seed -> torch's CPU generator state after manual_seed(seed)


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
