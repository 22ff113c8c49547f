"""Conformance kit: the invariants every score and attention must satisfy (DESIGN.md, Contracts).

A plugin author's test is one line:

    from attnx.testing import check_attention, check_score

    def test_gaussian():
        check_score(GaussianScore, bandwidth=0.5)

The checks, by name (`CHECKS`, in the order they run; each failure message starts with the name):

  flags            the capability flags are consistent (a known placement, causal only with positions)
  shapes           context [B, Tq, output_dim], weights [B, ..., Tq, Tk]; a score's [..., Tq, Tk]
  single_key       a sequence with a single valid key gets a finite context and weights
  weights          returned weights are finite, ≥ 0 and sum to 1 over each query's keys
  masking          masked keys get exactly 0 weight; changing padded inputs changes no real output
  fast_path        need_weights=False returns the context of need_weights=True
  prepare          attend_at(query, prepare(keys, values, mask), positions) equals forward
  batch            each sequence alone gets the output it gets in the batch
  padding          extra padding (a longer padded length) changes no real output
  finiteness       outputs are finite; NaN/inf at padded positions reaches no real output or weight
  causality        under causal positions, changing later tokens changes no earlier output   (causal)
  permutation      permuted inputs give permuted outputs             (position_free, position-free score)
  gradients        every parameter receives a non-zero finite gradient
  cached_decoding  one token at a time through `AttentionSite.cache` equals a full causal pass over
                   the prefix, also after a beam-search reorder (`KVCache.select`)          (causal)

Each check runs where the mechanism's capability flags say it applies, in every setting the flags
allow: cross-attention for one decoder step (Tq = 1) and for Tq = 3 queries (`cross_attention`);
self-attention, query = keys = values (`self_attention`), also under a causal mask (`causal`). A score
that `uses_positions` is checked only inside mechanisms that take positions: with any other mechanism
it is not a legal combination, and nothing runs. The checks run in float64 and eval mode (dropout off)
on small random inputs from fixed seeds: a batch of three sequences with 5, 3 and 1 valid tokens.

`check_attention(cls, score, checks=("causality",))` runs chosen checks alone; every check function
returns the names of the checks that applied and passed. `projection_loss` is the loss the gradient
check backpropagates; a plugin's own gradient tests can use it too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from attnx.nn.attention import PLACEMENTS, Attention, Mechanism, ScoreFactory, SoftmaxAttention
from attnx.nn.positions import Positions
from attnx.nn.scores import Score, build_score
from attnx.nn.transformer import AttentionSite, KVCache
from attnx.registry import RegistryError, load_all, registry

LENGTHS = (5, 3, 1)  # valid tokens per sequence; the last has a single valid key
B = len(LENGTHS)
TK = max(LENGTHS)  # keys per sequence, padding included
DIMS = ((8, 6, 5), (8, 8, 5))  # cross-attention (query, key, value); the second when Dq == Dk is needed
SELF_DIM = 8  # self-attention's one width (divisible by multi_head's default 4 heads)
EXTRA = 3  # padding the padding check adds
PERMUTATION = (3, 0, 4, 1, 2)
BEAMS = (1, 0, 0)  # the cached-decoding check's KVCache.select: reorders and repeats, as beam search does
REORDER_AT = 2  # ... after this many decoding steps
POISONS = (math.nan, math.inf, -math.inf)
ATOL = 1e-8  # float64: equal computations agree far below this
CACHE_ATOL = 1e-5  # a cache may legitimately sum in another order


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
            self._built[options] = _build(self.make, options)
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


def _cross(dims: tuple[int, int, int], tq: int, positions: bool) -> Case:
    """Tq queries attending to TK keys, padded to LENGTHS; queries at 0..Tq-1 and keys at 0..TK-1."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, t, d, generator=g, dtype=torch.float64) for t, d in zip((tq, TK, TK), dims))
    at = Positions(Positions.span(tq), Positions.span(TK)) if positions else None
    real = torch.ones(B, tq, dtype=torch.bool)
    return Case(f"cross-attention, Tq={tq}", q, k, v, _mask(), real, at)


def _self(x: torch.Tensor, mask: torch.Tensor, causal: bool, positions: bool) -> Case:
    """x [B, T, D] attending to itself; positions when asked for, and always when causal."""
    at = Positions.self_attention(x.size(1), causal) if positions or causal else None
    name = f"self-attention{', causal' if causal else ''}, T={x.size(1)}"
    return Case(name, x, x, x, mask, mask, at, self_attention=True)


def _mask() -> torch.Tensor:
    """[B, TK], True at the LENGTHS valid tokens of each sequence."""
    return torch.arange(TK) < torch.tensor(LENGTHS)[:, None]


def _sequence(seed: int = 3) -> torch.Tensor:
    """[B, TK, SELF_DIM] random tokens for self-attention."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, TK, SELF_DIM, generator=g, dtype=torch.float64)


def _cases(subject: Subject) -> list[tuple[Attention, Case]]:
    """(mechanism, inputs) for every setting the flags allow: cross-attention for Tq = 1 and 3,
    self-attention, and causal self-attention."""
    cls, out = subject.cls, []
    if cls.cross_attention:
        att, dims = subject.build(DIMS)
        out += [(att, _cross(dims, tq, cls.takes_positions)) for tq in (1, 3)]
    if cls.self_attention:
        att, _ = subject.build(((SELF_DIM,) * 3,))
        out.append((att, _self(_sequence(), _mask(), False, cls.takes_positions)))
        if cls.causal:
            out.append((att, _self(_sequence(), _mask(), True, cls.takes_positions)))
    return out


def _padded(case: Case, fill: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Case:
    """`case` with `fill(x, pad)` applied to its padded keys/values (and queries in self-attention);
    pad [B, T, 1] is True at padding."""
    pad = ~case.mask.unsqueeze(-1)
    if case.self_attention:
        x = fill(case.query, pad)
        return dataclasses.replace(case, query=x, keys=x, values=x)
    return dataclasses.replace(case, keys=fill(case.keys, pad), values=fill(case.values, pad))


def _noise(x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    """x with large random changes at the padding (pad True)."""
    g = torch.Generator().manual_seed(1)
    return x + pad * 100 * torch.randn(x.shape, generator=g, dtype=x.dtype)


def _extended(case: Case) -> Case:
    """`case` padded EXTRA positions further: random inputs there, masked."""
    g = torch.Generator().manual_seed(4)
    more = partial(torch.randn, generator=g, dtype=torch.float64)
    mask = F.pad(case.mask, (0, EXTRA), value=False)
    if case.self_attention:
        x = torch.cat([case.query, more(B, EXTRA, case.query.size(-1))], dim=1)
        causal = case.positions is not None and case.positions.causal
        return _self(x, mask, causal, case.positions is not None)
    keys = torch.cat([case.keys, more(B, EXTRA, case.keys.size(-1))], dim=1)
    values = torch.cat([case.values, more(B, EXTRA, case.values.size(-1))], dim=1)
    at = None if case.positions is None else Positions(case.positions.query, Positions.span(keys.size(1)))
    return dataclasses.replace(case, keys=keys, values=values, mask=mask, positions=at)


# ---------------------------------------------------------------------------------------------
# The checks


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
    for att, case in _cases(subject):
        ctx, w = _call(att, case)
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
    score = _build(lambda dq, dk, dv: cls(dq, dk, **hyperparams), DIMS)[0]
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
    for att, case in _cases(subject):
        outputs = tuple(_pick(x, last) for x in _call(att, case))
        _require(
            _finite(outputs, case.real[-1:]),
            f"({case.name}): NaN/inf in the context of a sequence with a single valid key",
        )


@_check("weights")
def _weights(subject: Subject) -> None:
    """Returned weights are finite, non-negative and sum to 1 over each real query's keys."""
    for att, case in _cases(subject):
        _, w = _call(att, case)
        if w is None:
            continue
        w = _rows(w, case.real)
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
    for att, case in _cases(subject):
        ctx, w = _call(att, case)
        if w is not None:
            leaked = _rows(w.masked_fill(~_keys_view(case.mask, w), 0), case.real).abs().max().item()
            _require(
                leaked == 0, f"({case.name}): masked keys receive weight (max {leaked:.3g}); they must get 0"
            )
        noisy = _padded(case, _noise)
        gap = _gap((ctx, w), _call(att, noisy), case.real)
        _require(
            gap < ATOL,
            f"({case.name}): the output changes when padded keys/values change (max diff {gap:.3g}): "
            "padding leaks into the result",
        )


@_check("fast_path")
def _fast_path(subject: Subject) -> None:
    """need_weights=False returns the context of need_weights=True (a fused kernel = the explicit path)."""
    for att, case in _cases(subject):
        (ctx, _), (fast, _) = _call(att, case), _call(att, case, need_weights=False)
        gap = _gap(ctx, fast, case.real)
        _require(
            gap < ATOL,
            f"({case.name}): need_weights=False changes the context (max diff {gap:.3g}); a fast path must "
            "equal the explicit one",
        )


@_check("prepare")
def _prepare(subject: Subject) -> None:
    """attend_at(query, prepare(keys, values, mask), positions) equals forward: sites call them apart."""
    for att, case in _cases(subject):
        try:
            stepped = att.attend_at(
                case.query, att.prepare(case.keys, case.values, case.mask), case.positions
            )
        except Exception as error:
            raise AssertionError(
                f"({case.name}): attend_at(query, prepare(keys, values, mask), positions) failed: "
                f"{type(error).__name__}: {error}"
            ) from error
        gap = _gap(_call(att, case), stepped, case.real)
        _require(
            gap < ATOL,
            f"({case.name}): attend_at(query, prepare(...)) differs from forward(...) (max diff {gap:.3g}); "
            "decoders use prepare/attend",
        )


@_check("batch")
def _batch(subject: Subject) -> None:
    """Each sequence alone (a batch of one, same padding) gets the output it gets in the batch."""
    for att, case in _cases(subject):
        together = _call(att, case)
        for b in range(B):
            index = torch.tensor([b])
            alone = case.rows(index)
            gap = _gap(tuple(_pick(x, index) for x in together), _call(att, alone), alone.real)
            _require(
                gap < ATOL,
                f"({case.name}): sequence {b} alone gets another output than in the batch (max diff "
                f"{gap:.3g}): the output depends on the other sequences",
            )


@_check("padding")
def _padding(subject: Subject) -> None:
    """Extra padding (a longer padded length) changes no real output, nor the real keys' weights."""
    for att, case in _cases(subject):
        ctx, w = _call(att, case)
        longer, longer_w = _call(att, _extended(case))
        trimmed = longer[:, : case.tq], None if longer_w is None else longer_w[..., : case.tq, :]
        gap = _gap((ctx, None if w is None else F.pad(w, (0, EXTRA))), trimmed, case.real)
        _require(
            gap < ATOL,
            f"({case.name}): {EXTRA} more padded positions change the real outputs (max diff {gap:.3g}): "
            "the output depends on the padded length",
        )


@_check("finiteness")
def _finiteness(subject: Subject) -> None:
    """Outputs are finite; NaN/inf at padding reaches no real output or weight, with or without weights."""
    for att, case in _cases(subject):
        ctx, w = _call(att, case)
        _require(_finite((ctx, w), case.real), f"({case.name}): NaN/inf in the context on finite inputs")
        for poison in POISONS:
            poisoned = _padded(case, lambda x, pad, p=poison: x.masked_fill(pad, p))
            for need_weights in (True, False):
                _require(
                    _finite(_call(att, poisoned, need_weights), case.real),
                    f"({case.name}): {poison} at padded positions reaches real outputs "
                    f"(need_weights={need_weights}); padding must be replaced, not multiplied by 0",
                )


@_check("causality", applies=_causal)
def _causality(subject: Subject) -> None:
    """Under causal positions, later tokens change no earlier output or weight; later keys get 0 weight."""
    att, _ = subject.build(((SELF_DIM,) * 3,))
    x, mask = _sequence(), _mask()
    case = _self(x, mask, True, True)
    ctx, w = _call(att, case)
    if w is not None:
        later = case.positions.relative(w.dim()) > 0
        peek = _rows(w.masked_fill(~later, 0), case.real).abs().max().item()
        _require(peek == 0, f"({case.name}): later keys receive weight (max {peek:.3g}); they must get 0")
    for cut in range(1, TK):
        changed = x.clone()
        changed[:, cut:] = _sequence(seed=cut + 10)[:, cut:]
        earlier = case.real & (torch.arange(TK) < cut)
        gap = _gap((ctx, w), _call(att, _self(changed, mask, True, True)), earlier)
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
        x, full = _sequence(), torch.ones(B, TK, dtype=torch.bool)
        case = _self(x, full, False, subject.cls.takes_positions)
        ctx, w = _call(att, case)
        expected = ctx[:, perm], None if w is None else w[..., perm, :][..., perm]
        gap = _gap(expected, _call(att, _self(x[:, perm], full, False, subject.cls.takes_positions)), full)
        _require(
            gap < ATOL,
            f"({case.name}): permuting the sequence does not permute the outputs (max diff {gap:.3g}); "
            "a position_free mechanism must not see where a token is",
        )
    if subject.cls.cross_attention:
        att, dims = subject.build(DIMS)
        case = _cross(dims, 3, subject.cls.takes_positions)
        ctx, w = _call(att, case)
        shuffled = dataclasses.replace(
            case, keys=case.keys[:, perm], values=case.values[:, perm], mask=case.mask[:, perm]
        )
        gap = _gap((ctx, None if w is None else w[..., perm]), _call(att, shuffled), case.real)
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
    for att, case in _cases(subject):
        by_mechanism.setdefault(id(att), (att, []))[1].append(case)
    for att, cases in by_mechanism.values():
        att.zero_grad(set_to_none=True)
        leaves = [_with_grad(case) for case in cases]
        projection_loss(*(_call(att, case)[0] for case, _ in leaves), seed=2).backward()
        for case, inputs in leaves:
            for name, x in inputs.items():
                _require(
                    x.grad is None or torch.isfinite(x.grad).all(),
                    f"({case.name}): NaN/inf gradient w.r.t. the {name}",
                )
        for name, p in att.named_parameters():
            _require(
                p.grad is not None and (p.grad != 0).any(),
                f"parameter '{name}' receives no gradient (unused, or cut off from the output)",
            )
            _require(torch.isfinite(p.grad).all(), f"parameter '{name}' gets a NaN/inf gradient")


@_check("cached_decoding", applies=_causal)
def _cached_decoding(subject: Subject) -> None:
    """One token at a time through `AttentionSite.cache` equals a full causal pass, also after a reorder."""
    site = _site(subject)
    x, mask = _sequence(), _mask()
    cache: KVCache | None = None
    for t in range(TK):
        if t == REORDER_AT:
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
        prefix = _self(x[:, : t + 1], mask[:, : t + 1], True, True)
        full = site(prefix.query, site.prepare(prefix.query, prefix.mask), prefix.positions, True)
        reference = full[0][:, t:], None if full[1] is None else full[1][..., t:, :]
        gap = _gap(reference, step, mask[:, t : t + 1])
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
    return _build(lambda *dims: AttentionSite(mechanism, dims[0], "causal"), ((SELF_DIM,) * 3,))[0]


# ---------------------------------------------------------------------------------------------
# Entry points


def check_score(cls: type[Score], checks: Iterable[str] | None = None, **hyperparams: Any) -> list[str]:
    """Check a Score class: its [..., Tq, Tk] scores, then every check (or `checks`) with the score inside
    plain softmax attention, softmax(f(q, K)) V, which is causal and passes positions. Returns the checks
    that ran."""
    subject = Subject(
        SoftmaxAttention,
        partial(cls, **hyperparams),
        {},
        f"score {cls.__name__}",
        uses_positions=cls.uses_positions,
        score_cls=cls,
        score_hyperparams=hyperparams,
    )
    return _run_checks(subject, checks)


def check_score_shapes(cls: type[Score], **hyperparams: Any) -> None:
    """The kit's first, cheap check alone: a score's [..., Tq, Tk] for Tq = 1 and Tq > 1, and the shapes
    in softmax attention (`attnx train` runs it on a plugin score before training)."""
    check_score(cls, checks=("shapes",), **hyperparams)


def check_attention(
    cls: type[Attention],
    score: str | ScoreFactory | None = None,
    checks: Iterable[str] | None = None,
    **hyperparams: Any,
) -> list[str]:
    """Check an Attention class with `score` (a registered name, a factory, or None for its default):
    every check (or `checks`) that its capability flags make applicable. Returns the checks that ran:
    none when `score` uses positions and the mechanism takes none (not a legal combination)."""
    return _run_checks(_attention(cls, score, hyperparams), checks)


def check_attention_shapes(
    cls: type[Attention], score: str | ScoreFactory | None = None, **hyperparams: Any
) -> None:
    """The kit's first, cheap check alone: the context [B, Tq, output_dim] and the weights [B, ..., Tq, Tk]
    in every setting the flags allow (`attnx train` runs it on a plugin mechanism)."""
    check_attention(cls, score, checks=("shapes",), **hyperparams)


def accepts(cls: type[Attention], score: type[Score]) -> bool:
    """Whether `cls` can host `score`: a score that uses positions needs a mechanism that takes them."""
    return cls.default_score is not None and (cls.takes_positions or not score.uses_positions)


def check_all() -> list[tuple[str, str, str | None]]:
    """Run the kit on every registered score, and every attention with every score it accepts (the
    mechanisms without a score alone). Returns (kind, name, error message or None)."""
    load_all()
    scores = registry("score").names()
    results = [("score", name, _error_of(check_score, registry("score").get(name))) for name in scores]
    for name in registry("attention").names():
        cls = registry("attention").get(name)
        if cls.default_score is None:
            results.append(("attention", name, _error_of(check_attention, cls)))
            continue
        for score in scores:
            if accepts(cls, registry("score").get(score)):
                results.append(("attention", f"{name} score={score}", _error_of(check_attention, cls, score)))
    return results


def projection_loss(*outputs: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """A scalar whose gradient reaches every element of `outputs`: each output dotted with a fixed
    random tensor. `outputs.sum()` is no such loss after a normalisation (a fresh LayerNorm's outputs
    and softmax weights sum to a constant), so its gradient is zero up to rounding."""
    g = torch.Generator().manual_seed(seed)
    return sum((x * torch.randn(x.shape, generator=g, dtype=x.dtype).to(x.device)).sum() for x in outputs)


def _attention(
    cls: type[Attention], score: str | ScoreFactory | None, hyperparams: dict[str, Any]
) -> Subject:
    """The subject for `cls` with `score` (a registered name, a factory or None), labelled for messages."""
    if isinstance(score, str):
        load_all()
        factory, named = registry("score").get(score), score
    else:
        factory, named = score, getattr(score, "__name__", score)
    label = f"attention {cls.__name__}" + ("" if score is None else f" with score {named}")
    return Subject(cls, factory, hyperparams, label, uses_positions=_uses_positions(cls, factory))


def _uses_positions(cls: type[Attention], factory: ScoreFactory | None) -> bool:
    """The `uses_positions` flag of the score `cls` gets: a Score class's (or a partial's of one), its
    default score's, or that of the score a factory function builds."""
    if factory is None:
        try:
            factory = registry("score").get(cls.default_score) if cls.default_score else None
        except RegistryError:  # an unknown default fails construction, under the first check
            return False
    target = factory
    while isinstance(target, partial):
        target = target.func
    if target is None or isinstance(target, type):
        return bool(getattr(target, "uses_positions", False))
    try:
        return bool(build_score(factory, SELF_DIM, SELF_DIM).uses_positions)
    except Exception:  # a factory that fails here fails construction too, under the first check
        return False


def _run_checks(subject: Subject, checks: Iterable[str] | None) -> list[str]:
    """Run the named checks (all by default) that apply to `subject`; the first failure raises
    AssertionError("<check>: <label> ..."). Returns the names of the checks that ran."""
    names = list(CHECKS) if checks is None else list(checks)
    unknown = [name for name in names if name not in CHECKS]
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; available: {', '.join(CHECKS)}")
    if subject.uses_positions and not subject.cls.takes_positions:
        return []  # not a legal combination: a site would never give the score its positions
    ran = []
    for name in names:
        check = CHECKS[name]
        if not check.applies(subject):
            continue
        try:
            with _one_thread():
                check.run(subject)
        except AssertionError as error:
            detail = str(error)
            raise AssertionError(
                f"{name}: {subject.label}{'' if detail.startswith('(') else ':'} {detail}"
            ) from error
        except Exception as error:  # a crash inside a check is that check's failure
            raise AssertionError(f"{name}: {subject.label}: {type(error).__name__}: {error}") from error
        ran.append(name)
    return ran


# ---------------------------------------------------------------------------------------------
# Helpers


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """One torch thread: on tensors this small, a thread pool only adds overhead (100x on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _error_of(check: Callable[..., Any], *args: Any) -> str | None:
    try:
        check(*args)
    except Exception as error:  # a crash is a failure to report, not a reason to stop
        return str(error) if isinstance(error, AssertionError) else f"{type(error).__name__}: {error}"
    return None


def _require(condition: Any, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _build(
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


def _call(att: Attention, case: Case, need_weights: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """forward on the case's inputs, with its positions when it has them; a crash names the case."""
    at = {} if case.positions is None else {"positions": case.positions}
    try:
        return att(case.query, case.keys, case.values, case.mask, need_weights=need_weights, **at)
    except Exception as error:
        raise AssertionError(f"({case.name}): forward failed: {type(error).__name__}: {error}") from error


def _rows(x: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """The real queries' rows: a context [B, Tq, D] -> [N, D]; weights [B, ..., Tq, Tk] -> [N, ..., Tk]."""
    return x.movedim(-2, 1)[real]


def _pick(x: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor | None:
    return None if x is None else x.index_select(0, index)


def _gap(a: Any, b: Any, real: torch.Tensor) -> float:
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
            gap = max(gap, (_rows(x, real) - _rows(y, real)).abs().max().item())
    return gap


def _finite(outputs: tuple[torch.Tensor, torch.Tensor | None], real: torch.Tensor) -> bool:
    return all(x is None or torch.isfinite(_rows(x, real)).all() for x in outputs)


def _keys_view(mask: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """~mask [B, Tk] shaped to broadcast over weights [B, ..., Tq, Tk]: True at masked keys."""
    return ~mask.view(mask.size(0), *[1] * (w.dim() - 2), mask.size(1))


def _with_grad(case: Case) -> tuple[Case, dict[str, torch.Tensor]]:
    """The case with fresh leaf inputs that require grad, and those inputs by name."""
    if case.self_attention:
        x = case.query.detach().clone().requires_grad_()
        return dataclasses.replace(case, query=x, keys=x, values=x), {"inputs": x}
    q, k, v = (t.detach().clone().requires_grad_() for t in (case.query, case.keys, case.values))
    return dataclasses.replace(case, query=q, keys=k, values=v), {"query": q, "keys": k, "values": v}
