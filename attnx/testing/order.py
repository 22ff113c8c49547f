"""Checks of what a query may see: queries of a call independent of each other (cross-attention), a causal
output a function of its prefix alone, no position in a position-free one, and decoding one token at a
time through the key/value cache equal to the full pass (`decoding` makes that pass)."""

from __future__ import annotations

import dataclasses

import torch

from attnx.nn.attention import Attention
from attnx.nn.transformer import KVCache
from attnx.testing.base import ATOL, CACHE_ATOL, CAUSAL, Check, causal, cross, registrar, require
from attnx.testing.calls import call, max_gap, real_rows
from attnx.testing.cases import Setting, Subject, edges, random_sequence, self_case
from attnx.testing.decoding import decoded

CHECKS: list[Check] = []
check = registrar(CHECKS)


def _position_free(subject: Subject) -> bool:
    return subject.cls.position_free and not subject.uses_positions


@check("queries", "each query of a call is computed alone", applies=cross)
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


@check("causality", CAUSAL, applies=causal)
def _causality(subject: Subject, setting: Setting) -> None:
    """Under causal positions the output at position t is a function of positions 0..t alone: the sequence
    cut after any t gives the same outputs and weights at 0..t, whatever followed (its content, its number
    of tokens, its padding), and later keys get 0 weight."""
    att, case = subject.case(setting, lambda case: case.causal)
    x, mask = case.query, case.mask
    assert case.positions is not None  # a causal case has them
    for need_weights in (True, False):
        ctx, w = subject.output(att, case, need_weights)
        if w is not None:
            later = case.positions.relative(w.dim()) > 0
            peek = real_rows(w.masked_fill(~later, 0), case.real).abs().max().item()
            require(
                peek == 0,
                f"({case.where(need_weights)}): later keys receive weight (max {peek:.3g}); they must get 0",
            )
        for cut in edges(setting.tk):
            prefix = self_case(x[:, :cut], mask[:, :cut], True, True, setting)
            cut_w = None if w is None else w[..., :cut, :cut]
            gap = max_gap((ctx[:, :cut], cut_w), call(att, prefix, need_weights), prefix.real)
            require(
                gap < ATOL,
                f"({case.where(need_weights)}): the outputs at positions < {cut} change when the sequence "
                f"ends at position {cut - 1} instead of going on to {setting.tk - 1} (max diff {gap:.3g}): "
                "they depend on what follows them (its content, its number of tokens or its padding), so "
                "training sees the future",
            )


@check("permutation", "position_free means permutation-equivariant", applies=_position_free)
def _permutation(subject: Subject, setting: Setting) -> None:
    """Permuted inputs give permuted outputs (self-attention); permuted keys/values permute only weights."""
    perm = torch.randperm(setting.tk, generator=torch.Generator().manual_seed(6))
    if subject.cls.self_attention:
        att, _ = subject.build(((subject.self_dim,) * 3,), setting)
        x, full = (
            random_sequence(setting, subject.self_dim),
            torch.ones(setting.batch, setting.tk, dtype=torch.bool),
        )
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


@check(
    "cached_decoding",
    "decoding token by token is the full pass",
    applies=causal,
    settings=lambda setting: not setting.train,  # decoding happens in eval mode
)
def _cached_decoding(subject: Subject, setting: Setting) -> None:
    """One token at a time through `AttentionSite.cache` equals a full causal pass over the prefix, with and
    without weights, in eval mode. A step asked for weights may return None when the full pass returns
    none, or when the mechanism's state does not grow (`constant_state`: a recurrent state, a full
    window): it keeps nothing per key to weigh. Its context is compared all the same."""
    first = decoded(subject, setting)
    site, x, mask = first.site, first.x, first.mask
    for t, steps in first.outputs.items():
        prefix = self_case(x[:, : t + 1], mask[:, : t + 1], True, True, setting)
        with torch.no_grad():
            full = site(prefix.query, site.prepare(prefix.query, prefix.mask), prefix.positions, True)
        reference = full[0][:, t:], None if full[1] is None else full[1][..., t:, :]
        where = f"(causal self-attention, step t={t}; {setting}, float64, need_weights="
        size = KVCache.state_size(site.mechanism, t + 1)
        require(
            steps[0][1] is not None or full[1] is None or constant_state(site.mechanism, t + 1),
            f"{where}True): a cached step asked for weights returned None, while the full pass returns "
            f"them; only a mechanism whose state does not grow (state_size(2n) == state_size(n); "
            f"{type(site.mechanism).__name__} declares {size} at n={t + 1}) may",
        )
        for need_weights, (context, weights) in zip((True, False), steps):
            weighed = need_weights and weights is not None and reference[1] is not None
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
