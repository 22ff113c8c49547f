"""Checks of what a query may see: queries of a call independent of each other (cross-attention), no
later token in a causal output, no position in a position-free one, and decoding one token at a time
through the key/value cache equal to the full pass; and that decoding (`decoding`), which the `state`
check runs too."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import NamedTuple

import torch

from attnx.nn.attention import Attention
from attnx.nn.positions import Positions
from attnx.nn.transformer import AttentionSite, KVCache
from attnx.testing.base import ATOL, CACHE_ATOL, Check, causal, cross, registrar, require
from attnx.testing.cases import (
    SELF_DIM,
    Setting,
    Subject,
    call,
    construct,
    edges,
    key_mask,
    max_gap,
    prepared_for,
    random_sequence,
    real_rows,
    self_case,
)

BEAMS = (1, 0, 0)  # the cached-decoding check's KVCache.select: reorders and repeats, as beam search does
REORDER_AT = 2  # ... after this many decoding steps

CHECKS: list[Check] = []
check = registrar(CHECKS)


def _position_free(subject: Subject) -> bool:
    return subject.cls.position_free and not subject.uses_positions


@check("queries", applies=cross)
def _queries(subject: Subject, setting: Setting) -> None:
    """Each query of a cross-attention call alone gets the output it gets among the others: under teacher
    forcing they are a target's positions, and a decoding step has one."""
    att, case = subject.case(setting, lambda case: case.many_queries)
    prepared = att.prepare(case.keys, case.values, case.mask)
    for need_weights in (True, False):
        ctx, w = subject.output(att, case, need_weights)
        for i in range(case.tq):
            at = (
                None
                if case.positions is None
                else dataclasses.replace(case.positions, query=case.positions.query[:, i : i + 1])
            )
            alone = att.attend_at(case.query[:, i : i + 1], prepared, at, need_weights)
            together = ctx[:, i : i + 1], None if w is None else w[..., i : i + 1, :]
            gap = max_gap(together, alone, case.real[:, i : i + 1])
            require(
                gap < CACHE_ATOL,
                f"({case.where(need_weights)}): query {i} alone gets another output than among "
                f"{case.tq} queries (max diff {gap:.3g}): the queries of a call see each other, so teacher "
                "forcing leaks later targets into earlier ones",
            )


@check("causality", applies=causal)
def _causality(subject: Subject, setting: Setting) -> None:
    """Under causal positions, later tokens change no earlier output or weight; later keys get 0 weight."""
    att, case = subject.case(setting, lambda case: case.causal)
    x, mask = case.query, case.mask
    assert case.positions is not None  # a causal case has them
    for need_weights in (True, False):
        ctx, w = subject.output(att, case, need_weights)
        if w is not None:
            later = case.positions.relative(w.dim()) > 0
            peek = real_rows(w.masked_fill(~later, 0), case.real).abs().max().item()
            require(peek == 0, f"({case.name}): later keys receive weight (max {peek:.3g}); they must get 0")
        for cut in edges(setting.tk):
            changed = x.clone()
            changed[:, cut:] = random_sequence(setting, seed=cut + 10)[:, cut:]
            earlier = case.real & (torch.arange(setting.tk) < cut)
            gap = max_gap(
                (ctx, w), call(att, self_case(changed, mask, True, True, setting), need_weights), earlier
            )
            require(
                gap < ATOL,
                f"({case.where(need_weights)}): outputs at positions < {cut} change when the tokens at "
                f"positions ≥ {cut} change (max diff {gap:.3g}): the future leaks into the past",
            )


@check("permutation", applies=_position_free)
def _permutation(subject: Subject, setting: Setting) -> None:
    """Permuted inputs give permuted outputs (self-attention); permuted keys/values permute only weights."""
    perm = torch.randperm(setting.tk, generator=torch.Generator().manual_seed(6))
    if subject.cls.self_attention:
        att, _ = subject.build(((SELF_DIM,) * 3,), setting)
        x, full = random_sequence(setting), torch.ones(setting.batch, setting.tk, dtype=torch.bool)
        case = self_case(x, full, False, subject.cls.takes_positions, setting)
        ctx, w = call(att, case)
        expected = ctx[:, perm], None if w is None else w[..., perm, :][..., perm]
        permuted = self_case(x[:, perm], full, False, subject.cls.takes_positions, setting)
        gap = max_gap(expected, call(att, permuted), full)
        require(
            gap < ATOL,
            f"({case.name}): permuting the sequence does not permute the outputs (max diff {gap:.3g}); "
            "a position_free mechanism must not see where a token is",
        )
    if subject.cls.cross_attention:
        att, case = subject.case(setting, lambda case: case.many_queries)
        ctx, w = subject.output(att, case)
        shuffled = dataclasses.replace(
            case, keys=case.keys[:, perm], values=case.values[:, perm], mask=case.mask[:, perm]
        )
        gap = max_gap((ctx, None if w is None else w[..., perm]), call(att, shuffled), case.real)
        require(
            gap < ATOL,
            f"({case.name}): permuting the keys with their values changes the context, or the weights "
            f"other than by the permutation (max diff {gap:.3g}); a position_free mechanism must not see "
            "where a key is",
        )


@check("cached_decoding", applies=causal)
def _cached_decoding(subject: Subject, setting: Setting) -> None:
    """One token at a time through `AttentionSite.cache` equals a full causal pass, also after a reorder,
    with and without weights. A mechanism whose state does not grow (`constant_state`: a recurrent state,
    a full window) keeps nothing per key to weigh, so a cached step asked for weights may return None
    instead; its context is compared all the same."""
    site = causal_site(subject, setting)
    compared = {0, *edges(setting.tk)}
    for step in decoding(site, setting, random_sequence(setting), key_mask(setting.lengths)):
        t, x, mask = step.t, step.x, step.mask
        if t not in compared:
            continue  # the cache still grows at every step
        at = Positions(Positions.span(1, start=t), Positions.span(t + 1), True)
        with stepping(step.when, setting):
            steps = [
                site(x[:, t : t + 1], step.cache.prepared, at, need_weights) for need_weights in (True, False)
            ]
        prefix = self_case(x[:, : t + 1], mask[:, : t + 1], True, True, setting)
        full = site(prefix.query, site.prepare(prefix.query, prefix.mask), prefix.positions, True)
        reference = full[0][:, t:], None if full[1] is None else full[1][..., t:, :]
        where = f"(causal self-attention, {step.when}; {setting}, float64, need_weights="
        constant = constant_state(site.mechanism, t + 1)
        require(
            steps[0][1] is not None or constant,
            f"{where}True): a cached step asked for weights returned None; only a mechanism whose state "
            f"does not grow (state_size(2n) == state_size(n); {type(site.mechanism).__name__} declares "
            f"{KVCache.state_size(site.mechanism, t + 1)} at n={t + 1}) may",
        )
        for need_weights, (context, weights) in zip((True, False), steps):
            weighed = need_weights and weights is not None
            gap = max_gap(
                reference if weighed else reference[0],
                (context, weights) if weighed else context,
                mask[:, t : t + 1],
            )
            cached = "extended by `extend`" if subject.cls.incremental else "re-prepared"
            require(
                gap < CACHE_ATOL,
                f"{where}{need_weights}): the cached step differs from a full causal pass over positions "
                f"0..{t} (max diff {gap:.3g}); a step is one query at position t and the keys 0..t, {cached}",
            )


def constant_state(mechanism: Attention, n: int) -> bool:
    """Whether the site's cache of `mechanism` holds as much after 2n tokens as after n (declared)."""
    size = KVCache.state_size(mechanism, n)
    return size is not None and size == KVCache.state_size(mechanism, 2 * n)


class Step(NamedTuple):
    """A decoding step: token t's index, its description for messages, the cache after it, and the
    batch's inputs and mask (reordered from REORDER_AT on)."""

    t: int
    when: str
    cache: KVCache
    x: torch.Tensor
    mask: torch.Tensor


def decoding(site: AttentionSite, setting: Setting, x: torch.Tensor, mask: torch.Tensor) -> Iterator[Step]:
    """x [B, T, D] (mask [B, T]) fed to `site.cache` one token at a time, as a decoder does, the batch
    reordered by BEAMS after REORDER_AT steps (`KVCache.select`, as beam search does). Each token is a
    fresh tensor, as a decoder's normed input is: a view would hold the whole sequence's storage."""
    cache: KVCache | None = None
    for t in range(setting.tk):
        if t == REORDER_AT:
            assert cache is not None  # REORDER_AT > 0: a step has filled it
            index = torch.tensor(BEAMS)[: setting.batch]
            cache, x, mask = cache.select(index), x[index], mask[index]
        when = f"step t={t}" + (f", after KVCache.select({list(BEAMS)})" if t >= REORDER_AT else "")
        with stepping(when, setting):
            cache = site.cache(x[:, t : t + 1].clone(), mask[:, t : t + 1], cache)
        yield Step(t, when, cache, x, mask)


@contextlib.contextmanager
def stepping(when: str, setting: Setting) -> Iterator[None]:
    """A decoding step's crash as the check's failure, naming the step."""
    try:
        yield
    except Exception as error:
        raise AssertionError(
            f"(causal self-attention, {when}; {setting}): decoding step failed: "
            f"{type(error).__name__}: {error}"
        ) from error


def causal_site(subject: Subject, setting: Setting) -> AttentionSite:
    """A causal self-attention site hosting the subject, built as the mechanism is (seed 0, float64),
    prepared for the setting."""
    mechanism = subject.mechanism()
    site = construct(lambda *dims: AttentionSite(mechanism, dims[0], "causal"), ((SELF_DIM,) * 3,))[0]
    return prepared_for(site, setting)
