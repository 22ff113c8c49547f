"""Checks that what a mechanism returns is what it computes: the weights are the ones its context uses,
every parameter element it can use gets a gradient, lower precisions stay finite and near float64 on large
inputs, and a fast path equals the plugin's own plain formula (`Attention.reference`)."""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Iterator

import torch

from attnx.nn.attention import Attention
from attnx.nn.positions import Positions
from attnx.nn.scores import Score
from attnx.testing.base import CACHE_ATOL, Check, registrar, require
from attnx.testing.cases import (
    DIMS,
    SELF_DIM,
    Case,
    Setting,
    Subject,
    all_finite,
    call,
    cases_for,
    edges,
    max_gap,
    projection_loss,
    real_rows,
    with_grad,
)

STEP = 1e-3  # central differences: exact for a context linear in the values, O(STEP²) otherwise
EXPLAINED = 1e-4  # the largest residual, relative to the context's change, that the weights may leave
# positions 0..23, then every 1.25-fold step up to 28,699: relative distances from 0 to beyond any table
# of relative positions (T5's buckets end at 128 by default)
SPREAD = sorted(set(range(24)) | {round(1.25**k) for k in range(47)})
LARGE = 30.0  # input scale at which unshifted exp(logits) overflows float32 and bfloat16
# |low − float64| per query relative to the float64 context's largest magnitude: in float32 the largest
# (the built-ins stay below 2e-5 at both scales), under bfloat16 autocast the mean over the queries at
# scale 1 (the built-ins stay below 0.011; a hard window may rightly flip a query whose centre rounds
# the other way, which a mean tolerates and a maximum would not)
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 0.1}
REFERENCE_LENGTHS = (1, 7, 33, 67)

CHECKS: list[Check] = []
check = registrar(CHECKS)


@check("weights_used", settings=lambda setting: setting.perturbed)
def _weights_used(subject: Subject, setting: Setting) -> None:
    """The returned weights explain the context: moving one key's value v_j by δu changes query i's
    context by Σ_h w_hij m_h(i), with the same H vectors m_h(i) for every key j (`explained`). With
    parameters moved from their initialisation: a gate initialised at zero hides every value at step 0."""
    for att, case in subject.cases(setting):
        if subject.output(att, case)[1] is None or one_query_of_many(case, subject.cases(setting)):
            continue
        gap = explained(att, case)
        require(
            gap < EXPLAINED,
            f"({case.name}): the returned weights do not explain the context (residual {gap:.3g} of how it "
            "moves with the values): the context uses other weights than those returned, so every heatmap "
            "of it is wrong",
        )


def one_query_of_many(case: Case, cases: list[tuple[Attention, Case]]) -> bool:
    """A cross-attention call of one query where one of several is checked too: the same arithmetic, row
    for row, so the costlier checks skip it (`queries` holds the two equal)."""
    return not case.self_attention and case.tq == 1 and any(c.many_queries for _, c in cases)


def explained(att: Attention, case: Case) -> float:
    """How far the first sequence's context is from a function of Σ_j w_hij W_h v_j: the largest residual
    of fitting, per query i, its change under a shift ±δu of one key's value (central differences, a
    batch row per shift) as Σ_h w_hij m_h(i), relative to the largest change. The weights are those the
    same call returns (they depend on queries and keys only).

    A per-head value map W_h and anything applied per query after the weighted sum (an output projection
    W^O over the heads, a gate, a tanh) are absorbed into m_h(i); weights that are not the coefficients of
    the values (top-k of them, renormalised, another temperature, averaged over heads) leave a residual."""
    one = case.rows(torch.tensor([0]))
    weights = call(att, one)[1]
    assert weights is not None  # the caller saw weights
    heaviest = weights[0].reshape(-1, weights.size(-1)).amax(0).topk(min(4, weights.size(-1))).indices
    # the keys at the edges of blocks and those weighted most (a window's), or every key of a short one
    keys = torch.tensor(sorted({0, *edges(int(one.mask.sum())), *heaviest.tolist()}))
    n = len(keys)
    g = torch.Generator().manual_seed(8)
    u = torch.randn(one.values.size(-1), generator=g, dtype=one.values.dtype)
    shift = torch.zeros(2 * n, *one.values.shape[1:], dtype=one.values.dtype)
    shift[2 * torch.arange(n), keys] = STEP * u
    shift[2 * torch.arange(n) + 1, keys] = -STEP * u

    def repeat(x: torch.Tensor) -> torch.Tensor:
        return x.expand(2 * n, *x.shape[1:])

    shifted = dataclasses.replace(
        one,
        query=repeat(one.query),
        keys=repeat(one.keys),
        values=repeat(one.values) + shift,
        mask=repeat(one.mask),
        real=repeat(one.real),
    )
    ctx, weights = call(att, shifted)  # weights from rows like these: the batch is a copy of one sequence
    assert weights is not None
    change = ((ctx[0::2] - ctx[1::2]) / (2 * STEP)).transpose(0, 1)[one.real[0]]  # [Tq real, n, D]
    w = (
        weights[0].reshape(-1, case.tq, weights.size(-1))[..., keys].permute(1, 2, 0)[one.real[0]]
    )  # [Tq, n, H]
    scale = change.abs().max().item()
    if scale == 0:  # the context ignores these values: right only if they weigh nothing
        return 0.0 if (w == 0).all() else float("inf")
    residual = change - w @ torch.linalg.lstsq(w, change).solution
    return residual.abs().max().item() / scale


@check("gradients", settings=lambda setting: setting.perturbed)
def _gradients(subject: Subject, setting: Setting) -> None:
    """Every parameter element the forward pass can use receives a non-zero finite gradient, and the inputs
    finite ones: from every call of the setting, and from calls whose positions run to 28,699 (`SPREAD`), so
    that a table indexed by relative position is reached wherever it has entries. With parameters moved
    from their initialisation: a gate initialised at zero (ReZero's α) rightly blocks every gradient
    beneath it at step 0."""
    by_mechanism: dict[int, tuple[Attention, list[Case]]] = {}
    for att, case in [*subject.cases(setting), *spread_cases(subject, setting)]:
        by_mechanism.setdefault(id(att), (att, []))[1].append(case)
    for att, cases in by_mechanism.values():
        att.zero_grad(set_to_none=True)
        leaves = [with_grad(case) for case in cases]
        projection_loss(*(call(att, case)[0] for case, _ in leaves), seed=2).backward()
        for case, inputs in leaves:
            for name, x in inputs.items():
                require(
                    x.grad is None or torch.isfinite(x.grad).all(),
                    f"({case.name}): NaN/inf gradient w.r.t. the {name}",
                )
        hosted = hosted_scores(att) if subject.score_cls is None else {}
        for name, p in att.named_parameters():
            grad = torch.zeros_like(p) if p.grad is None else p.grad  # none reached it: zero
            require(torch.isfinite(grad).all(), f"({setting}): parameter '{name}' gets a NaN/inf gradient")
            reached = grad != 0
            heads = next((h for score, h in hosted.items() if name.startswith(f"{score}.")), None)
            if heads is not None:
                reached = per_head(reached, heads)
            dead = (~reached).nonzero()
            unit = (
                "elements"
                if heads is None
                else f"heads (of {heads}; its score is held to every element alone)"
            )
            require(
                len(dead) == 0,
                f"({setting}): parameter '{name}' {tuple(p.shape)}: {len(dead)} of {reached.numel()} {unit} "
                f"receive no gradient, the first at {tuple(dead[0].tolist()) if len(dead) else ()} (unused, "
                "used by one head only, or cut off from the output)",
            )


def hosted_scores(att: Attention) -> dict[str, int]:
    """The modules of the scores a mechanism hosts, by name, with the heads each is shared over. Their
    parameters are held to a gradient per head, not per element: a mechanism may mask what its score could
    use (a window masks the buckets of distances beyond it), and `check_score` holds the score alone, in
    softmax attention over every distance, to every element."""
    return {
        name: getattr(module, "num_heads", 1)
        for name, module in att.named_modules()
        if isinstance(module, Score) and any(True for _ in module.parameters())
    }


def per_head(reached: torch.Tensor, heads: int) -> torch.Tensor:
    """Whether each head's slice of a parameter got a gradient: along the one dim of size `heads` (the
    whole parameter when no dim, or more than one, has that size)."""
    dims = [d for d, size in enumerate(reached.shape) if size == heads]
    if heads == 1 or len(dims) != 1:
        return reached.any().reshape(1)
    return reached.movedim(dims[0], 0).flatten(1).any(1)


def spread_cases(subject: Subject, setting: Setting) -> Iterator[tuple[Attention, Case]]:
    """Unpadded calls at the positions `SPREAD` (a mechanism that takes positions), bidirectional and, for a
    causal mechanism, causal: T queries attending to T keys (cross-attention) and self-attention."""
    if not subject.cls.takes_positions:
        return
    at = torch.tensor(SPREAD)[None]
    t = at.size(1)
    g = torch.Generator().manual_seed(7)
    mask = torch.ones(1, t, dtype=torch.bool)
    for causal in (False, True) if subject.cls.causal else (False,):
        kind = f"T={t} at positions 0..{SPREAD[-1]}{', causal' if causal else ''}"
        if subject.cls.cross_attention:
            att, dims = subject.build(DIMS, setting)
            q, k, v = (torch.randn(1, t, d, generator=g, dtype=torch.float64) for d in dims)
            yield (
                att,
                Case(f"cross-attention, {kind}", setting, q, k, v, mask, mask, Positions(at, at, causal)),
            )
        if subject.cls.self_attention:
            att, _ = subject.build(((SELF_DIM,) * 3,), setting)
            x = torch.randn(1, t, SELF_DIM, generator=g, dtype=torch.float64)
            case = Case(
                f"self-attention, {kind}", setting, x, x, x, mask, mask, Positions(at, at, causal), True
            )
            yield att, case


def _perturbed_eval(setting: Setting) -> bool:
    return setting.perturbed and not setting.train


@check("precision", settings=_perturbed_eval)
def _precision(subject: Subject, setting: Setting) -> None:
    """In float32, and in float32 under bfloat16 autocast (CPU), the outputs are finite and within
    `TOLERANCE` of float64 (the same rounded parameters and inputs), on inputs of scale 1 and of scale
    `LARGE`, where exp of unshifted logits overflows; with and without weights (a fused or blocked path
    has its own arithmetic). With parameters moved from their initialisation, in eval mode: initial ones
    keep logits smaller, and train mode with dropout at 0 computes what eval mode does."""
    copies: dict[int, tuple[Attention, Attention]] = {}
    for att, case in subject.cases(setting):
        if one_query_of_many(case, subject.cases(setting)):
            continue
        if id(att) not in copies:
            low = copy.deepcopy(att).float()
            copies[id(att)] = low, copy.deepcopy(low).double()
        low, high = copies[id(att)]
        both = _scaled(case, LARGE)  # rows at scale 1, then the same rows at scale LARGE: one call each
        exact = both.mapped(torch.Tensor.double)
        # the same path in float64: fast_path compares the paths; this compares dtypes
        contexts = {need_weights: call(high, exact, need_weights)[0] for need_weights in (True, False)}
        for dtype, need_weights in itertools.product((torch.float32, torch.bfloat16), (True, False)):
            expected = contexts[need_weights]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
                got = call(low, both, need_weights)
            named = str(dtype).removeprefix("torch.")
            for half, scale in enumerate((1.0, LARGE)):
                rows = slice(half * case.batch, (half + 1) * case.batch)
                where = f"({case.where(need_weights, named)}, inputs of scale {scale:g})"
                outputs = tuple(x if x is None else x[rows] for x in got)
                require(all_finite(outputs, case.real), f"{where}: NaN/inf in the outputs")
                if dtype == torch.bfloat16 and scale != 1:
                    continue  # 8 bits of mantissa move logits of ~1000 by ~4: softmax may rightly differ
                worst = _relative_gap(got[0][rows], expected[rows], case.real, dtype)
                require(
                    worst < TOLERANCE[dtype],
                    f"{where}: the context differs from float64 by {worst:.3g} of the output's size "
                    f"({'largest' if dtype == torch.float32 else 'mean'} over the queries; tolerance "
                    f"{TOLERANCE[dtype]:g})",
                )


def _relative_gap(got: torch.Tensor, expected: torch.Tensor, real: torch.Tensor, dtype: torch.dtype) -> float:
    """Per real query, its largest |got − expected| relative to the float64 output's largest magnitude:
    the largest over the queries in float32, their mean under bfloat16."""
    size = max(real_rows(expected, real).abs().max().item(), 1e-30)
    gap = real_rows(got.double() - expected, real).abs().amax(-1) / size
    return gap.max().item() if dtype == torch.float32 else gap.mean().item()


def _scaled(case: Case, scale: float) -> Case:
    """The case's rows in float32, followed by the same rows times `scale` (a batch of both; positions are
    shared by the batch)."""
    twice = case.mapped(lambda x: torch.cat([x, x * scale]).float())
    return dataclasses.replace(twice, mask=case.mask.repeat(2, 1), real=case.real.repeat(2, 1))


def _has_reference(subject: Subject) -> bool:
    return subject.cls.reference is not Attention.reference


@check("reference", applies=_has_reference, settings=_perturbed_eval)
def _reference(subject: Subject, setting: Setting) -> None:
    """forward equals the plugin's `reference` (context, and weights when asked for) at lengths 1 to 67,
    alone and padded, in every call the flags allow, with perturbed parameters in eval mode (initial ones,
    or train mode with dropout at 0, would only repeat the comparison)."""
    for length in REFERENCE_LENGTHS:
        for lengths in sorted({(length,), (length, length // 2 + 1, 1)}):
            at = dataclasses.replace(setting, lengths=lengths)
            for att, case in cases_for(subject, at):
                kwargs = {} if case.positions is None else {"positions": case.positions}
                try:
                    expected = att.reference(case.query, case.keys, case.values, case.mask, True, **kwargs)
                except Exception as error:
                    raise AssertionError(
                        f"({case.name}): reference failed: {type(error).__name__}: {error}"
                    ) from error
                for need_weights in (True, False):
                    got = call(att, case, need_weights)
                    gap = max_gap(
                        got if need_weights else got[0], expected if need_weights else expected[0], case.real
                    )
                    require(
                        gap < CACHE_ATOL,
                        f"({case.where(need_weights)}, lengths {lengths}): forward differs from the plugin's "
                        f"reference (max diff {gap:.3g})",
                    )
