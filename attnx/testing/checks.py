"""The checks: each a named invariant of the contract (ARCHITECTURE.md, Contracts), registered in `CHECKS` in
the order they run, with the capability flags that say where it is promised."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from attnx.nn.attention import PLACEMENTS, Attention, Mechanism
from attnx.nn.positions import Positions
from attnx.nn.scores import Score
from attnx.nn.transformer import AttentionSite, KVCache
from attnx.testing.cases import (
    DIMS,
    EXTRA,
    SELF_DIM,
    TK,
    B,
    Case,
    Subject,
    all_finite,
    call,
    cases_for,
    construct,
    cross_case,
    extended,
    key_mask,
    masked_keys,
    max_gap,
    noise,
    padded,
    projection_loss,
    random_sequence,
    real_rows,
    select,
    self_case,
    with_grad,
)

PERMUTATION = (3, 0, 4, 1, 2)
BEAMS = (1, 0, 0)  # the cached-decoding check's KVCache.select: reorders and repeats, as beam search does
REORDER_AT = 2  # ... after this many decoding steps
POISONS = (math.nan, math.inf, -math.inf)
ATOL = 1e-8  # float64: equal computations agree far below this
CACHE_ATOL = 1e-5  # a cache may legitimately sum in another order


@dataclass(frozen=True)
class Check:
    """A named invariant: `run(subject)` raises AssertionError when it breaks; it runs only where
    `applies(subject)` (the capability flags) says it is promised."""

    name: str
    run: Callable[[Subject], None]
    applies: Callable[[Subject], bool]


CHECKS: dict[str, Check] = {}


def _check(name: str, applies: Callable[[Subject], bool] = lambda subject: True) -> Callable:
    def register(run: Callable[[Subject], None]) -> Callable[[Subject], None]:
        CHECKS[name] = Check(name, run, applies)
        return run

    return register


def _causal(subject: Subject) -> bool:
    return subject.cls.causal and subject.cls.self_attention


def _position_free(subject: Subject) -> bool:
    return subject.cls.position_free and not subject.uses_positions


@_check("flags")
def _flags(subject: Subject) -> None:
    """The capability flags are consistent: a known placement, a site to serve, causal with positions."""
    cls = subject.cls
    _require(cls.placement in PLACEMENTS, f"placement '{cls.placement}' is not one of {PLACEMENTS}")
    _require(
        cls.self_attention or cls.cross_attention,
        "declares neither self_attention nor cross_attention: no site can host it",
    )
    _require(
        cls.takes_positions or not cls.causal,
        "declares causal without takes_positions: attend_at never gives it the positions it must honour",
    )


@_check("shapes")
def _shapes(subject: Subject) -> None:
    """Context [B, Tq, output_dim], weights [B, ..., Tq, Tk] or None; a score's scores [..., Tq, Tk]."""
    if subject.score_cls is not None:
        _score_shapes(subject.score_cls, subject.score_hyperparams)
    for att, case in cases_for(subject):
        ctx, w = call(att, case)
        expected = (B, case.tq, att.output_dim)
        _require(
            tuple(ctx.shape) == expected,
            f"({case.name}): wrong output shape: context is {tuple(ctx.shape)}, expected "
            f"[B, Tq, output_dim] = {expected}",
        )
        tk = case.keys.size(1)
        _require(
            w is None or (w.dim() >= 3 and w.shape[0] == B and tuple(w.shape[-2:]) == (case.tq, tk)),
            f"({case.name}): wrong weights shape {None if w is None else tuple(w.shape)}, expected "
            f"[B, ..., Tq, Tk] with B={B}, Tq={case.tq}, Tk={tk}",
        )


def _score_shapes(cls: type[Score], hyperparams: dict[str, Any]) -> None:
    """[..., Tq, Tk] scores for leading dims (2, 3), for Tq = 1 and Tq = 3."""
    score = construct(lambda dq, dk, dv: cls(dq, dk, **hyperparams), DIMS)[0]
    dq, dk = score.query_dim, score.key_dim
    for tq in (1, 3):
        g = torch.Generator().manual_seed(tq)
        q = torch.randn(2, 3, tq, dq, generator=g, dtype=torch.float64)
        k = torch.randn(2, 3, TK, dk, generator=g, dtype=torch.float64)
        at = Positions(Positions.span(tq), Positions.span(TK))
        try:
            out = score.at(q, score.prepare(k), at)
        except Exception as error:
            raise AssertionError(f"(Tq={tq}): forward failed: {type(error).__name__}: {error}") from error
        expected = (2, 3, tq, TK)
        _require(
            tuple(out.shape) == expected,
            f"wrong output shape: scores are {tuple(out.shape)} for query {tuple(q.shape)} and keys "
            f"{tuple(k.shape)}, expected [..., Tq, Tk] = {expected}",
        )


@_check("single_key")
def _single_key(subject: Subject) -> None:
    """A sequence with a single valid key (the batch's last) gets a finite context and weights."""
    last = torch.tensor([B - 1])
    for att, case in cases_for(subject):
        outputs = tuple(select(x, last) for x in call(att, case))
        _require(
            all_finite(outputs, case.real[-1:]),
            f"({case.name}): NaN/inf in the context of a sequence with a single valid key",
        )


@_check("weights")
def _weights(subject: Subject) -> None:
    """Returned weights are finite, non-negative and sum to 1 over each real query's keys."""
    for att, case in cases_for(subject):
        _, w = call(att, case)
        if w is None:
            continue
        w = real_rows(w, case.real)
        _require(torch.isfinite(w).all(), f"({case.name}): NaN/inf in the weights")
        _require((w >= 0).all(), f"({case.name}): weights are negative (min {w.min().item():.3g})")
        total = w.sum(-1)
        _require(
            (total - 1).abs().max() < 1e-6,
            f"({case.name}): weights do not sum to 1 over unmasked keys (row sums from "
            f"{total.min().item():.4g} to {total.max().item():.4g})",
        )


@_check("masking")
def _masking(subject: Subject) -> None:
    """Masked keys get exactly 0 weight, and changing padded inputs changes no real output."""
    for att, case in cases_for(subject):
        ctx, w = call(att, case)
        if w is not None:
            leaked = real_rows(w.masked_fill(~masked_keys(case.mask, w), 0), case.real).abs().max().item()
            _require(
                leaked == 0, f"({case.name}): masked keys receive weight (max {leaked:.3g}); they must get 0"
            )
        noisy = padded(case, noise)
        gap = max_gap((ctx, w), call(att, noisy), case.real)
        _require(
            gap < ATOL,
            f"({case.name}): the output changes when padded keys/values change (max diff {gap:.3g}): "
            "padding leaks into the result",
        )


@_check("fast_path")
def _fast_path(subject: Subject) -> None:
    """need_weights=False returns the context of need_weights=True (a fused kernel = the explicit path)."""
    for att, case in cases_for(subject):
        (ctx, _), (fast, _) = call(att, case), call(att, case, need_weights=False)
        gap = max_gap(ctx, fast, case.real)
        _require(
            gap < ATOL,
            f"({case.name}): need_weights=False changes the context (max diff {gap:.3g}); a fast path must "
            "equal the explicit one",
        )


@_check("prepare")
def _prepare(subject: Subject) -> None:
    """attend_at(query, prepare(keys, values, mask), positions) equals forward: sites call them apart."""
    for att, case in cases_for(subject):
        try:
            stepped = att.attend_at(
                case.query, att.prepare(case.keys, case.values, case.mask), case.positions
            )
        except Exception as error:
            raise AssertionError(
                f"({case.name}): attend_at(query, prepare(keys, values, mask), positions) failed: "
                f"{type(error).__name__}: {error}"
            ) from error
        gap = max_gap(call(att, case), stepped, case.real)
        _require(
            gap < ATOL,
            f"({case.name}): attend_at(query, prepare(...)) differs from forward(...) (max diff {gap:.3g}); "
            "decoders use prepare/attend",
        )


@_check("batch")
def _batch(subject: Subject) -> None:
    """Each sequence alone (a batch of one, same padding) gets the output it gets in the batch."""
    for att, case in cases_for(subject):
        together = call(att, case)
        for b in range(B):
            index = torch.tensor([b])
            alone = case.rows(index)
            gap = max_gap(tuple(select(x, index) for x in together), call(att, alone), alone.real)
            _require(
                gap < ATOL,
                f"({case.name}): sequence {b} alone gets another output than in the batch (max diff "
                f"{gap:.3g}): the output depends on the other sequences",
            )


@_check("padding")
def _padding(subject: Subject) -> None:
    """Extra padding (a longer padded length) changes no real output, nor the real keys' weights."""
    for att, case in cases_for(subject):
        ctx, w = call(att, case)
        longer, longer_w = call(att, extended(case))
        trimmed = longer[:, : case.tq], None if longer_w is None else longer_w[..., : case.tq, :]
        gap = max_gap((ctx, None if w is None else F.pad(w, (0, EXTRA))), trimmed, case.real)
        _require(
            gap < ATOL,
            f"({case.name}): {EXTRA} more padded positions change the real outputs (max diff {gap:.3g}): "
            "the output depends on the padded length",
        )


@_check("finiteness")
def _finiteness(subject: Subject) -> None:
    """Outputs are finite; NaN/inf at padding reaches no real output or weight, with or without weights."""
    for att, case in cases_for(subject):
        ctx, w = call(att, case)
        _require(all_finite((ctx, w), case.real), f"({case.name}): NaN/inf in the context on finite inputs")
        for poison in POISONS:
            poisoned = padded(case, partial(torch.masked_fill, value=poison))
            for need_weights in (True, False):
                _require(
                    all_finite(call(att, poisoned, need_weights), case.real),
                    f"({case.name}): {poison} at padded positions reaches real outputs "
                    f"(need_weights={need_weights}); padding must be replaced, not multiplied by 0",
                )


@_check("causality", applies=_causal)
def _causality(subject: Subject) -> None:
    """Under causal positions, later tokens change no earlier output or weight; later keys get 0 weight."""
    att, _ = subject.build(((SELF_DIM,) * 3,))
    x, mask = random_sequence(), key_mask()
    case = self_case(x, mask, True, True)
    ctx, w = call(att, case)
    assert case.positions is not None  # a causal case has them
    if w is not None:
        later = case.positions.relative(w.dim()) > 0
        peek = real_rows(w.masked_fill(~later, 0), case.real).abs().max().item()
        _require(peek == 0, f"({case.name}): later keys receive weight (max {peek:.3g}); they must get 0")
    for cut in range(1, TK):
        changed = x.clone()
        changed[:, cut:] = random_sequence(seed=cut + 10)[:, cut:]
        earlier = case.real & (torch.arange(TK) < cut)
        gap = max_gap((ctx, w), call(att, self_case(changed, mask, True, True)), earlier)
        _require(
            gap < ATOL,
            f"({case.name}): outputs at positions < {cut} change when the tokens at positions ≥ {cut} "
            f"change (max diff {gap:.3g}): the future leaks into the past",
        )


@_check("permutation", applies=_position_free)
def _permutation(subject: Subject) -> None:
    """Permuted inputs give permuted outputs (self-attention); permuted keys/values permute only weights."""
    perm = torch.tensor(PERMUTATION)
    if subject.cls.self_attention:
        att, _ = subject.build(((SELF_DIM,) * 3,))
        x, full = random_sequence(), torch.ones(B, TK, dtype=torch.bool)
        case = self_case(x, full, False, subject.cls.takes_positions)
        ctx, w = call(att, case)
        expected = ctx[:, perm], None if w is None else w[..., perm, :][..., perm]
        permuted = self_case(x[:, perm], full, False, subject.cls.takes_positions)
        gap = max_gap(expected, call(att, permuted), full)
        _require(
            gap < ATOL,
            f"({case.name}): permuting the sequence does not permute the outputs (max diff {gap:.3g}); "
            "a position_free mechanism must not see where a token is",
        )
    if subject.cls.cross_attention:
        att, dims = subject.build(DIMS)
        case = cross_case(dims, 3, subject.cls.takes_positions)
        ctx, w = call(att, case)
        shuffled = dataclasses.replace(
            case, keys=case.keys[:, perm], values=case.values[:, perm], mask=case.mask[:, perm]
        )
        gap = max_gap((ctx, None if w is None else w[..., perm]), call(att, shuffled), case.real)
        _require(
            gap < ATOL,
            f"({case.name}): permuting the keys with their values changes the context, or the weights "
            f"other than by the permutation (max diff {gap:.3g}); a position_free mechanism must not see "
            "where a key is",
        )


@_check("gradients")
def _gradients(subject: Subject) -> None:
    """Every parameter receives a non-zero finite gradient, and the inputs finite ones, from every setting."""
    by_mechanism: dict[int, tuple[Attention, list[Case]]] = {}
    for att, case in cases_for(subject):
        by_mechanism.setdefault(id(att), (att, []))[1].append(case)
    for att, cases in by_mechanism.values():
        att.zero_grad(set_to_none=True)
        leaves = [with_grad(case) for case in cases]
        projection_loss(*(call(att, case)[0] for case, _ in leaves), seed=2).backward()
        for case, inputs in leaves:
            for name, x in inputs.items():
                _require(
                    x.grad is None or torch.isfinite(x.grad).all(),
                    f"({case.name}): NaN/inf gradient w.r.t. the {name}",
                )
        for name, p in att.named_parameters():
            grad = torch.zeros_like(p) if p.grad is None else p.grad  # none reached it: zero
            _require(
                (grad != 0).any(),
                f"parameter '{name}' receives no gradient (unused, or cut off from the output)",
            )
            _require(torch.isfinite(grad).all(), f"parameter '{name}' gets a NaN/inf gradient")


@_check("cached_decoding", applies=_causal)
def _cached_decoding(subject: Subject) -> None:
    """One token at a time through `AttentionSite.cache` equals a full causal pass, also after a reorder."""
    site = _site(subject)
    x, mask = random_sequence(), key_mask()
    cache: KVCache | None = None
    for t in range(TK):
        if t == REORDER_AT:
            assert cache is not None  # REORDER_AT > 0: a step has filled it
            index = torch.tensor(BEAMS)
            cache, x, mask = cache.select(index), x[index], mask[index]
        when = f"step t={t}" + (f", after KVCache.select({list(BEAMS)})" if t >= REORDER_AT else "")
        try:
            cache = site.cache(x[:, t : t + 1], mask[:, t : t + 1], cache)
            step = site(
                x[:, t : t + 1],
                cache.prepared,
                Positions(Positions.span(1, start=t), Positions.span(t + 1), True),
                True,
            )
        except Exception as error:
            raise AssertionError(
                f"(causal self-attention, {when}): decoding step failed: {type(error).__name__}: {error}"
            ) from error
        prefix = self_case(x[:, : t + 1], mask[:, : t + 1], True, True)
        full = site(prefix.query, site.prepare(prefix.query, prefix.mask), prefix.positions, True)
        reference = full[0][:, t:], None if full[1] is None else full[1][..., t:, :]
        gap = max_gap(reference, step, mask[:, t : t + 1])
        cached = "extended by `extend`" if subject.cls.incremental else "re-prepared"
        _require(
            gap < CACHE_ATOL,
            f"(causal self-attention, {when}): the cached step differs from a full causal pass over "
            f"positions 0..{t} (max diff {gap:.3g}); a step is one query at position t and the keys 0..t, "
            f"{cached}",
        )


def _site(subject: Subject) -> AttentionSite:
    """A causal self-attention site hosting the subject, built as the mechanism is (seed 0, float64, eval)."""
    mechanism = Mechanism(subject.cls, subject.score, subject.hyperparams)
    return construct(lambda *dims: AttentionSite(mechanism, dims[0], "causal"), ((SELF_DIM,) * 3,))[0]


def _require(condition: Any, message: str) -> None:
    if not condition:
        raise AssertionError(message)
