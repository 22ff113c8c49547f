"""Checks that what a mechanism returns is what it computes: the weights are the ones its context uses,
lower precisions stay finite and near float64 on large inputs, and a fast path equals the plugin's own
plain formula (`Attention.reference`). Gradients are `gradients.py`'s."""

from __future__ import annotations

import copy
import dataclasses
import itertools

import torch

from attnx.nn.attention import Attention
from attnx.testing.base import CACHE_ATOL, WEIGHTS, Check, registrar, require
from attnx.testing.calls import all_finite, call, max_gap, real_rows
from attnx.testing.cases import LONG, Case, Setting, Subject, cases_for, edges

STEP = 1e-3  # central differences: exact for a context linear in the values, O(STEP²) otherwise
EXPLAINED = 1e-4  # the largest residual, relative to the context's change, that the weights may leave
LARGE = 30.0  # input scale at which unshifted exp(logits) overflows float32 and bfloat16
# |low − float64| per query relative to the float64 context's largest magnitude: in float32 the largest
# (the built-ins stay below 2e-5 at both scales), under bfloat16 autocast the mean over the queries at
# scale 1 (the built-ins stay below 0.011; a hard window may rightly flip a query whose centre rounds
# the other way, which a mean tolerates and a maximum would not)
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 0.1}
REFERENCE_LENGTHS = (1, 7, 33, 67)

CHECKS: list[Check] = []
check = registrar(CHECKS)


@check("weights_used", WEIGHTS, settings=lambda setting: setting.lengths == LONG)
def _weights_used(subject: Subject, setting: Setting) -> None:
    """The returned weights explain the context: moving one key's value v_j by δu changes query i's
    context by Σ_h w_hij m_h(i), with the same H vectors m_h(i) for every key j (`explained`). In the long
    setting, where a window or a block leaves out keys, and with parameters moved from their
    initialisation: a gate initialised at zero hides every value at step 0."""
    for att, case in subject.cases(setting):
        if subject.output(att, case)[1] is None or one_query_of_many(case, subject.cases(setting)):
            continue
        gap = explained(att, case)
        require(
            gap < EXPLAINED,
            f"({case.name}): the returned weights are not the coefficients of the values in the context: "
            f"moving one key's value moves each query's context by other than that key's weights times "
            f"vectors shared by every key (residual {gap:.3g} of the move); the context weighs the values "
            "otherwise than the weights say (top-k, renormalised, re-tempered or averaged over heads)",
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
    # gelsd (SVD): a head that weighs no key of a query leaves a zero column, which gelsy (the CPU default)
    # misfits
    residual = change - w @ torch.linalg.lstsq(w, change, driver="gelsd").solution
    return residual.abs().max().item() / scale


def _perturbed_eval(setting: Setting) -> bool:
    return setting.perturbed and not setting.train


@check("precision", "lower precisions stay near float64", settings=_perturbed_eval)
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


@check("reference", "forward is the plugin's own equation", applies=_has_reference, settings=_perturbed_eval)
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
