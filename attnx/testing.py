"""Conformance kit: the invariants every score and attention must satisfy (DESIGN.md, Contracts).

A plugin author's test is one line:

    from attnx.testing import check_attention, check_score

    def test_gaussian():
        check_score(GaussianScore, bandwidth=0.5)

Each check raises AssertionError with a message saying which invariant broke. The checks run in
float64 and eval mode (dropout off) on small random inputs from fixed seeds: a batch of three
sequences with 5, 3 and 1 valid keys, for Tq=1 (a decoder step) and Tq=3.

`projection_loss` is the loss the gradient check backpropagates; a plugin's own gradient tests can
use it too.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from attnx.nn.attention import PLACEMENTS, Attention, ScoredAttention, ScoreFactory
from attnx.nn.positions import Positions
from attnx.nn.scores import Score
from attnx.registry import load_all, registry

LENGTHS = (5, 3, 1)  # valid keys per sequence; the last row has a single valid key
TK = max(LENGTHS)
DIMS = ((8, 6, 5), (8, 8, 5))  # (query, key, value); the second for scores that need Dq == Dk
ATOL = 1e-8  # float64: equal computations agree far below this


def check_score(cls: type[Score], **hyperparams: Any) -> None:
    """Check a Score class: [..., Tq, Tk] scores for any leading dims, then every attention
    invariant with the score inside plain softmax attention, softmax(f(q, K)) V."""
    check_score_shapes(cls, **hyperparams)
    label = f"score {cls.__name__}"
    _check(lambda dq, dk, dv: ScoredAttention(dq, dk, dv, score=partial(cls, **hyperparams)), label)


def check_score_shapes(cls: type[Score], **hyperparams: Any) -> None:
    """The kit's first, cheap check alone: [..., Tq, Tk] scores for Tq = 1 and Tq > 1 (`attnx train`
    runs it on a plugin score before training)."""
    label = f"score {cls.__name__}"
    score = _build(lambda dq, dk, dv: cls(dq, dk, **hyperparams), label)[0]
    dq, dk = score.query_dim, score.key_dim
    for tq in (1, 3):
        g = torch.Generator().manual_seed(tq)
        q = torch.randn(2, 3, tq, dq, generator=g, dtype=torch.float64)
        k = torch.randn(2, 3, TK, dk, generator=g, dtype=torch.float64)
        # a score that uses positions gets queries at 0..Tq-1 and keys at 0..Tk-1
        positions = [Positions(Positions.span(tq), Positions.span(TK))] if score.uses_positions else []
        try:
            out = score(q, score.prepare(k), *positions)
        except Exception as error:
            raise AssertionError(
                f"{label} (Tq={tq}): forward failed: {type(error).__name__}: {error}"
            ) from error
        expected = (2, 3, tq, TK)
        _require(
            tuple(out.shape) == expected,
            f"{label}: wrong output shape: scores are {tuple(out.shape)} for query {tuple(q.shape)} and "
            f"keys {tuple(k.shape)}, expected [..., Tq, Tk] = {expected}",
        )


def check_attention(
    cls: type[Attention], score: str | ScoreFactory | None = None, **hyperparams: Any
) -> None:
    """Check an Attention class with `score` (a registered name, a factory, or None for its
    default): shapes, weights, masking, gradients, padding invariance, for Tq=1 and Tq>1."""
    _check(*_attention(cls, score, hyperparams))


def check_attention_shapes(
    cls: type[Attention], score: str | ScoreFactory | None = None, **hyperparams: Any
) -> None:
    """The kit's first, cheap check alone: the context [B, Tq, output_dim] and the weights
    [B, ..., Tq, Tk] for Tq = 1 and Tq > 1 (`attnx train` runs it on a plugin mechanism)."""
    make, label = _attention(cls, score, hyperparams)
    att, dims = _build(make, label)
    for tq in (1, 3):
        _outputs(att, dims, tq, f"{label} (Tq={tq})")


def _attention(
    cls: type[Attention], score: str | ScoreFactory | None, hyperparams: dict[str, Any]
) -> tuple[Callable[[int, int, int], Attention], str]:
    """(dims -> the mechanism with `score`, its label in messages); its placement checked."""
    if isinstance(score, str):
        load_all()
        factory, named = registry("score").get(score), score
    else:
        factory, named = score, getattr(score, "__name__", score)
    label = f"attention {cls.__name__}" + ("" if score is None else f" with score {named}")
    _require(cls.placement in PLACEMENTS, f"{label}: placement '{cls.placement}' is not one of {PLACEMENTS}")
    return lambda dq, dk, dv: cls(dq, dk, dv, factory, **hyperparams), label


def check_all() -> list[tuple[str, str, str | None]]:
    """Run the kit on every registered score, and every attention with every score it accepts
    (the mechanisms without a score alone). Returns (kind, name, error message or None)."""
    load_all()
    scores = registry("score").names()
    results = [("score", name, _error_of(check_score, registry("score").get(name))) for name in scores]
    for name in registry("attention").names():
        cls = registry("attention").get(name)
        for score in [None] if cls.default_score is None else scores:
            label = name if score is None else f"{name} score={score}"
            results.append(("attention", label, _error_of(check_attention, cls, score)))
    return results


def projection_loss(*outputs: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """A scalar whose gradient reaches every element of `outputs`: each output dotted with a fixed
    random tensor. `outputs.sum()` is no such loss after a normalisation (a fresh LayerNorm's outputs
    and softmax weights sum to a constant), so its gradient is zero up to rounding."""
    g = torch.Generator().manual_seed(seed)
    return sum((x * torch.randn(x.shape, generator=g, dtype=x.dtype).to(x.device)).sum() for x in outputs)


def _error_of(check: Callable[..., None], *args: Any) -> str | None:
    try:
        check(*args)
    except Exception as error:  # a crash is a failure to report, not a reason to stop
        return str(error) if isinstance(error, AssertionError) else f"{type(error).__name__}: {error}"
    return None


def _require(condition: Any, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _build(make: Callable[[int, int, int], Any], label: str) -> tuple[Any, tuple[int, int, int]]:
    """Build with distinct dims, falling back to Dq == Dk for modules that refuse them."""
    for dims in DIMS:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            try:
                return make(*dims).double().eval(), dims
            except ValueError as error:
                refusal = error
            except Exception as error:
                raise AssertionError(
                    f"{label}: construction failed: {type(error).__name__}: {error}"
                ) from error
    raise AssertionError(f"{label}: construction failed for (query, key, value) dims {DIMS}: {refusal}")


def _inputs(dims: tuple[int, int, int], tq: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(len(LENGTHS), t, d, generator=g, dtype=torch.float64) for t, d in zip((tq, TK, TK), dims)
    )
    mask = torch.arange(TK) < torch.tensor(LENGTHS)[:, None]
    return q, k, v, mask


def _run(att: Attention, where: str, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    try:
        return att(*args, **kwargs)
    except Exception as error:
        raise AssertionError(f"{where}: forward failed: {type(error).__name__}: {error}") from error


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item() if a.shape == b.shape else float("inf")


def _check(make: Callable[[int, int, int], Attention], label: str) -> None:
    att, dims = _build(make, label)
    for tq in (1, 3):
        _check_outputs(att, dims, tq, f"{label} (Tq={tq})")
    _check_gradients(att, dims, label)


def _outputs(
    att: Attention, dims: tuple[int, int, int], tq: int, where: str
) -> tuple[tuple[torch.Tensor, ...], torch.Tensor, torch.Tensor | None]:
    """(inputs, context, weights) of one call, their shapes checked."""
    q, k, v, mask = _inputs(dims, tq)
    ctx, w = _run(att, where, q, k, v, mask)
    expected = (len(LENGTHS), tq, att.output_dim)
    _require(
        tuple(ctx.shape) == expected,
        f"{where}: wrong output shape: context is {tuple(ctx.shape)}, expected [B, Tq, output_dim] = "
        f"{expected}",
    )
    _require(
        w is None or (w.dim() >= 3 and w.shape[0] == len(LENGTHS) and tuple(w.shape[-2:]) == (tq, TK)),
        f"{where}: wrong weights shape {None if w is None else tuple(w.shape)}, expected [B, ..., Tq, Tk] "
        f"with B={len(LENGTHS)}, Tq={tq}, Tk={TK}",
    )
    return (q, k, v, mask), ctx, w


def _check_outputs(att: Attention, dims: tuple[int, int, int], tq: int, where: str) -> None:
    (q, k, v, mask), ctx, w = _outputs(att, dims, tq, where)
    finite = torch.isfinite(ctx).flatten(1).all(1)
    _require(finite[-1], f"{where}: NaN/inf in the context of a sequence with a single valid key")
    _require(finite.all(), f"{where}: NaN/inf in the context")
    if w is not None:
        _check_weights(w, mask, where)

    g = torch.Generator().manual_seed(1)
    pad = ~mask.unsqueeze(-1)
    k2 = k + pad * 100 * torch.randn(k.shape, generator=g, dtype=k.dtype)
    v2 = v + pad * 100 * torch.randn(v.shape, generator=g, dtype=v.dtype)
    ctx2, w2 = _run(att, where, q, k2, v2, mask)
    _require(
        _diff(ctx2, ctx) < ATOL and (w is None or _diff(w2, w) < ATOL),
        f"{where}: the output changes when masked keys/values change (max diff {_diff(ctx2, ctx):.3g}): "
        "padding leaks into the result",
    )

    for b, n in enumerate(LENGTHS):
        one, w1 = _run(att, where, q[b : b + 1], k[b : b + 1, :n], v[b : b + 1, :n], mask[b : b + 1, :n])
        same = _diff(one[0], ctx[b]) < ATOL and (w is None or _diff(w1[0], w[b, ..., :n]) < ATOL)
        _require(
            same,
            f"{where}: batch results differ from one-sequence-at-a-time results (sequence {b}, {n} valid "
            f"keys, max diff {_diff(one[0], ctx[b]):.3g}): the output depends on padding or on the batch",
        )

    fast, _ = _run(att, where, q, k, v, mask, need_weights=False)
    _require(
        _diff(fast, ctx) < ATOL,
        f"{where}: need_weights=False changes the context (max diff {_diff(fast, ctx):.3g}); a fast path "
        "must equal the explicit one",
    )
    try:
        stepped, _ = att.attend(q, att.prepare(k, v, mask))
    except Exception as error:
        raise AssertionError(
            f"{where}: attend(query, prepare(keys, values, mask)) failed: {error}"
        ) from error
    _require(
        _diff(stepped, ctx) < ATOL,
        f"{where}: attend(query, prepare(...)) differs from forward(...) "
        f"(max diff {_diff(stepped, ctx):.3g}); decoders use prepare/attend",
    )


def _check_weights(w: torch.Tensor, mask: torch.Tensor, where: str) -> None:
    b = len(LENGTHS)
    _require(torch.isfinite(w).all(), f"{where}: NaN/inf in the weights (a row with a single valid key?)")
    _require((w >= 0).all(), f"{where}: weights are negative (min {w.min().item():.3g})")
    masked = ~mask.view(b, *[1] * (w.dim() - 2), TK).expand_as(w)
    _require(
        (w[masked] == 0).all(),
        f"{where}: masked keys receive weight (max {w[masked].abs().max().item():.3g}); "
        "they must get exactly 0",
    )
    total = w.sum(-1)
    _require(
        (total - 1).abs().max() < 1e-6,
        f"{where}: weights do not sum to 1 over unmasked keys (row sums from {total.min().item():.4g} "
        f"to {total.max().item():.4g})",
    )


def _check_gradients(att: Attention, dims: tuple[int, int, int], label: str) -> None:
    q, k, v, mask = _inputs(dims, 3)
    inputs = {"query": q.requires_grad_(), "keys": k.requires_grad_(), "values": v.requires_grad_()}
    att.zero_grad(set_to_none=True)
    ctx, _ = _run(att, label, q, k, v, mask)
    projection_loss(ctx, seed=2).backward()
    for name, x in inputs.items():
        _require(
            x.grad is None or torch.isfinite(x.grad).all(), f"{label}: NaN/inf gradient w.r.t. the {name}"
        )
    for name, p in att.named_parameters():
        _require(
            p.grad is not None and (p.grad != 0).any(),
            f"{label}: parameter '{name}' receives no gradient (unused, or cut off from the output)",
        )
        _require(torch.isfinite(p.grad).all(), f"{label}: parameter '{name}' gets a NaN/inf gradient")
