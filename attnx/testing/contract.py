"""The 2015 contract, checked call by call: consistent flags, shapes, weights that are a distribution over
the real keys, masking, the fast path and `prepare`/`attend_at` equal to `forward`, and outputs that depend
neither on the rest of the batch nor on the padded length nor on NaN/inf at padding."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from attnx.nn.attention import PLACEMENTS, WEIGHTS_ARE
from attnx.nn.positions import Positions
from attnx.nn.scores import Score
from attnx.testing.base import ATOL, WEIGHTS, Check, registrar, require
from attnx.testing.calls import all_finite, call, construct, masked_keys, max_gap, real_rows, select
from attnx.testing.cases import DIMS, EXTRA, Setting, Subject, extended, noise, padded

POISONS = (math.nan, math.inf, -math.inf)

CHECKS: list[Check] = []
check = registrar(CHECKS)


@check("flags", "the capability flags are consistent")
def _flags(subject: Subject, setting: Setting) -> None:
    """The capability flags are consistent: a known placement, a site to serve, causal with positions."""
    cls = subject.cls
    require(cls.placement in PLACEMENTS, f"placement '{cls.placement}' is not one of {PLACEMENTS}")
    require(
        cls.self_attention or cls.cross_attention,
        "declares neither self_attention nor cross_attention: no site can host it",
    )
    require(
        cls.takes_positions or not cls.causal,
        "declares causal without takes_positions: attend_at never gives it the positions it must honour",
    )
    require(
        cls.weights_are in WEIGHTS_ARE,
        f"weights_are = {cls.weights_are!r} is not one of {', '.join(map(repr, WEIGHTS_ARE))}",
    )


@check("shapes", "outputs have the shapes of the contract")
def _shapes(subject: Subject, setting: Setting) -> None:
    """Context [B, Tq, output_dim], weights [B, ..., Tq, Tk] or None; a score's scores [..., Tq, Tk]."""
    if subject.score_cls is not None:
        _score_shapes(subject.score_cls, subject.score_hyperparams, setting)
    for att, case in subject.cases(setting):
        ctx, w = subject.output(att, case)
        expected = (case.batch, case.tq, att.output_dim)
        require(
            tuple(ctx.shape) == expected,
            f"({case.name}): wrong output shape: context is {tuple(ctx.shape)}, expected "
            f"[B, Tq, output_dim] = {expected}",
        )
        tk = case.keys.size(1)
        require(
            w is None or (w.dim() >= 3 and w.shape[0] == case.batch and tuple(w.shape[-2:]) == (case.tq, tk)),
            f"({case.name}): wrong weights shape {None if w is None else tuple(w.shape)}, expected "
            f"[B, ..., Tq, Tk] with B={case.batch}, Tq={case.tq}, Tk={tk}",
        )


def _score_shapes(cls: type[Score], hyperparams: dict[str, Any], setting: Setting) -> None:
    """[..., Tq, Tk] scores for leading dims (2, 3), for Tq = 1 and Tq = 3."""
    score = construct(lambda dq, dk, dv: cls(dq, dk, **hyperparams), DIMS)[0]
    dq, dk, tk = score.query_dim, score.key_dim, setting.tk
    for tq in (1, 3):
        g = torch.Generator().manual_seed(tq)
        q = torch.randn(2, 3, tq, dq, generator=g, dtype=torch.float64)
        k = torch.randn(2, 3, tk, dk, generator=g, dtype=torch.float64)
        at = Positions(Positions.span(tq), Positions.span(tk))
        try:
            out = score.at(q, score.prepare(k), at)
        except Exception as error:
            raise AssertionError(
                f"(Tq={tq}, Tk={tk}): forward failed: {type(error).__name__}: {error}"
            ) from error
        expected = (2, 3, tq, tk)
        require(
            tuple(out.shape) == expected,
            f"wrong output shape: scores are {tuple(out.shape)} for query {tuple(q.shape)} and keys "
            f"{tuple(k.shape)}, expected [..., Tq, Tk] = {expected}",
        )


@check("single_key", "one real key is enough", settings=lambda setting: setting.lengths[-1] == 1)
def _single_key(subject: Subject, setting: Setting) -> None:
    """A sequence with a single valid key (the batch's last) gets a finite context and weights."""
    for att, case in subject.cases(setting):
        last = torch.tensor([case.batch - 1])
        outputs = tuple(select(x, last) for x in subject.output(att, case))
        require(
            all_finite(outputs, case.real[-1:]),
            f"({case.name}): NaN/inf in the context of a sequence with a single valid key",
        )


@check("weights", WEIGHTS)
def _weights(subject: Subject, setting: Setting) -> None:
    """Returned weights are finite and what the mechanism declares them to be (`weights_are`): a
    distribution over the keys each real query sees (≥ 0, summing to 1), non-negative, or signed."""
    declared = subject.cls.weights_are
    for att, case in subject.cases(setting):
        _, w = subject.output(att, case)
        if w is None:
            continue
        w = real_rows(w, case.real)
        require(torch.isfinite(w).all(), f"({case.name}): NaN/inf in the weights")
        if declared == "signed":
            continue
        require(
            (w >= 0).all(),
            f"({case.name}): weights are negative (min {w.min().item():.3g}), and {NAME_OF[declared]}; a "
            "mechanism whose weights may be negative declares weights_are = 'signed'",
        )
        total = w.sum(-1)
        off = (total - 1).abs().max().item()
        require(
            declared != "distribution" or off < 1e-6,
            f"({case.name}): weights do not sum to 1 over the keys each query sees (row sums from "
            f"{total.min().item():.4g} to {total.max().item():.4g}, {off:.3g} from 1 at most), and "
            f"{NAME_OF[declared]}; a mechanism "
            "whose weights are not normalised (sigmoid or ReLU attention) declares weights_are = "
            "'nonnegative'",
        )


# what each declaration says, for messages
NAME_OF = {
    "distribution": "the mechanism declares them a distribution (weights_are = 'distribution', the default)",
    "nonnegative": "the mechanism declares them non-negative (weights_are = 'nonnegative')",
}


@check("masking", "masked keys are invisible")
def _masking(subject: Subject, setting: Setting) -> None:
    """Masked keys get exactly 0 weight, and changing padded inputs changes no real output."""
    for att, case in subject.cases(setting):
        ctx, w = subject.output(att, case)
        if w is not None:
            leaked = real_rows(w.masked_fill(~masked_keys(case.mask, w), 0), case.real).abs().max().item()
            require(
                leaked == 0, f"({case.name}): masked keys receive weight (max {leaked:.3g}); they must get 0"
            )
        gap = max_gap((ctx, w), call(att, padded(case, noise)), case.real)
        require(
            gap < ATOL,
            f"({case.name}): the output changes when padded keys/values change (max diff {gap:.3g}): "
            "padding leaks into the result",
        )


@check("fast_path", "need_weights changes only whether weights are returned")
def _fast_path(subject: Subject, setting: Setting) -> None:
    """need_weights=False returns the context of need_weights=True (a fused kernel = the explicit path)."""
    for att, case in subject.cases(setting):
        (ctx, _), (fast, _) = subject.output(att, case), subject.output(att, case, False)
        gap = max_gap(ctx, fast, case.real)
        require(
            gap < ATOL,
            f"({case.name}): need_weights=False changes the context (max diff {gap:.3g}); a fast path must "
            "equal the explicit one",
        )


@check("prepare", "prepare then attend_at is forward")
def _prepare(subject: Subject, setting: Setting) -> None:
    """attend_at(query, prepare(keys, values, mask), positions) equals forward: sites call them apart."""
    for att, case in subject.cases(setting):
        try:
            stepped = att.attend_at(
                case.query, att.prepare(case.keys, case.values, case.mask), case.positions
            )
        except Exception as error:
            raise AssertionError(
                f"({case.name}): attend_at(query, prepare(keys, values, mask), positions) failed: "
                f"{type(error).__name__}: {error}"
            ) from error
        gap = max_gap(subject.output(att, case), stepped, case.real)
        require(
            gap < ATOL,
            f"({case.name}): attend_at(query, prepare(...)) differs from forward(...) (max diff {gap:.3g}); "
            "decoders use prepare/attend",
        )


@check("batch", "each sequence of a batch is computed alone")
def _batch(subject: Subject, setting: Setting) -> None:
    """Each sequence alone (a batch of one, same padding) gets the output it gets in the batch."""
    for att, case in subject.cases(setting):
        together = subject.output(att, case)
        for b in range(case.batch):
            index = torch.tensor([b])
            alone = case.rows(index)
            gap = max_gap(tuple(select(x, index) for x in together), call(att, alone), alone.real)
            require(
                gap < ATOL,
                f"({case.name}): sequence {b} alone gets another output than in the batch (max diff "
                f"{gap:.3g}): the output depends on the other sequences",
            )


@check("padding", "the padded length is invisible")
def _padding(subject: Subject, setting: Setting) -> None:
    """Extra padding (a longer padded length) changes no real output, nor the real keys' weights."""
    for att, case in subject.cases(setting):
        ctx, w = subject.output(att, case)
        longer, longer_w = call(att, extended(case))
        trimmed = longer[:, : case.tq], None if longer_w is None else longer_w[..., : case.tq, :]
        gap = max_gap((ctx, None if w is None else F.pad(w, (0, EXTRA))), trimmed, case.real)
        require(
            gap < ATOL,
            f"({case.name}): {EXTRA} more padded positions change the real outputs (max diff {gap:.3g}): "
            "the output depends on the padded length",
        )


@check("finiteness", "finite inputs give finite outputs whatever the padding holds")
def _finiteness(subject: Subject, setting: Setting) -> None:
    """Outputs are finite; NaN/inf at padding reaches no real output or weight, with or without weights."""
    for att, case in subject.cases(setting):
        require(
            all_finite(subject.output(att, case), case.real),
            f"({case.name}): NaN/inf in the context on finite inputs",
        )
        for need_weights in (True, False):
            if all_finite(call(att, padded(case, poisons), need_weights), case.real):
                continue  # all three at once passed: no need to try each
            for poison in POISONS:
                poisoned = padded(case, partial(torch.masked_fill, value=poison))
                require(
                    all_finite(call(att, poisoned, need_weights), case.real),
                    f"({case.where(need_weights)}): {poison} at padded positions reaches real outputs; "
                    "padding must be replaced, not multiplied by 0",
                )
            raise AssertionError(
                f"({case.where(need_weights)}): NaN, inf and -inf at padded positions together reach real "
                "outputs (each alone does not); padding must be replaced, not multiplied by 0"
            )


def poisons(x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    """x with NaN, inf and -inf in turn at its padded positions (pad [B, T, 1] True there)."""
    kinds = torch.tensor(POISONS, dtype=x.dtype)[torch.arange(x.size(1)) % len(POISONS)]
    return torch.where(pad, kinds[None, :, None], x)
