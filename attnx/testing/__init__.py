"""Conformance kit: the invariants every score and attention must satisfy (ARCHITECTURE.md, Contracts).

A plugin author's test is one line:

    from attnx.testing import check_attention, check_score

    def test_gaussian():
        check_score(GaussianScore, bandwidth=0.5)

The checks, by name (`CHECKS`, in the order they run; each failure message starts with the name, then
the call and setting it failed in: kind, lengths, parameters, mode, dtype, need_weights, and the largest
difference):

  flags            the capability flags are consistent (a known placement, causal only with positions)
  shapes           context [B, Tq, output_dim], weights [B, ..., Tq, Tk]; a score's [..., Tq, Tk]
  single_key       a sequence with a single valid key gets a finite context and weights
  weights          returned weights are finite, ≥ 0 and sum to 1 over each query's keys
  masking          masked keys get exactly 0 weight; changing padded inputs changes no real output
  fast_path        need_weights=False returns the context of need_weights=True
  prepare          attend_at(query, prepare(keys, values, mask), positions) equals forward
  batch            each sequence alone gets the output it gets in the batch
  queries          each query of a cross-attention call alone gets its output among Tq = 3   (cross)
  padding          extra padding (a longer padded length) changes no real output
  finiteness       outputs are finite; NaN/inf at padded positions reaches no real output or weight,
                   with and without weights
  causality        under causal positions, changing later tokens changes no earlier output, with and
                   without weights                                                           (causal)
  permutation      permuted inputs give permuted outputs             (position_free, position-free score)
  weights_used     the returned weights explain the context: per query, its change under a shift of
                   one key's value is Σ_h w_hij m_h, the same m_h for every key (`fidelity.explained`)
  gradients        every parameter element receives a non-zero finite gradient, also from calls at
                   positions up to 28,699 (a relative-position table is reached wherever it has entries);
                   a score hosted by a mechanism per head (a window may mask its far entries)
  precision        float32, and bfloat16 autocast, stay finite and near float64 on inputs of scale 1
                   and 30 (where exp of unshifted logits overflows), with and without weights
  cached_decoding  one token at a time through `AttentionSite.cache` equals a full causal pass over
                   the prefix, also after a beam-search reorder (`KVCache.select`), with and without
                   weights; a step may return no weights when the state does not grow, state_size(2n) ==
                   state_size(n) (a recurrent state keeps nothing per key)                     (causal)
  state            decoding token by token, the cache holds per sequence what `Attention.state_size(n)`
                   declares (plus the n·D inputs a site keeps for a mechanism that re-prepares), at n = 1
                   to 67; an undeclared state fails                                          (causal)
  reference        forward equals the plugin's `Attention.reference`, its plain formula, at lengths
                   1 to 67, alone and padded                                    (a plugin that ships one)
  compiled         `attend` traced whole by Dynamo in an rnn decoder's compiled call (Tq = 1, no
                   weights, training mode) gives eager's context and gradients; one that cannot be
                   traced passes, and `attnx plugins check` says why it runs eager  (cross, no positions)

Each check runs where the mechanism's capability flags say it applies, in every call the flags allow:
cross-attention for one decoder step (Tq = 1) and for Tq = 3 queries (`cross_attention`);
self-attention, query = keys = values (`self_attention`), also under a causal mask (`causal`). A score
that `uses_positions` is checked only inside mechanisms that take positions: with any other mechanism
it is not a legal combination, and nothing runs. Every check runs in float64 from fixed seeds in each
of three settings (`cases.SETTINGS`) where it can tell something (`Check.settings`): a batch of
sequences with 5, 3 and 1 valid tokens and the parameters as initialised, in eval mode; the same lengths
with perturbed parameters (as after training: a term initialised at zero shows) in train mode with every
nn.Dropout at p = 0; and 67 and 37 tokens (past any block of 8 to 64, ending in a partial one) with
perturbed parameters in eval mode. gradients and weights_used judge perturbed parameters only (a gate
initialised at zero blocks both at step 0); precision, reference and state run in the long setting.

`check_attention(cls, score, checks=("causality",))` runs chosen checks alone; every check function
returns the names of the checks that applied and passed. `check_all(name)` runs the kit on one plugin
(`attnx plugins check NAME`), `compile_notes(name)` says whether each of its mechanisms compiles.
`projection_loss` is the loss the gradient check backpropagates; a plugin's own gradient tests can use
it too.

The inputs (the subject, the settings, the calls, the helpers that compare outputs) are in `cases.py`,
what a check is in `base.py`, the checks in `contract.py` (the 2015 contract), `order.py` (what a query
may see), `fidelity.py` (whether what is returned is what is computed), `state.py` (what decoding
keeps) and `compiled.py`, and their order in `checks.py`.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any

import torch

from attnx.nn.attention import Attention
from attnx.nn.classic import SoftmaxAttention
from attnx.nn.scores import Score, ScoreFactory, build_score
from attnx.registry import RegistryError, load_all, registry
from attnx.testing.cases import SELF_DIM, SETTINGS, Subject, projection_loss
from attnx.testing.checks import CHECKS
from attnx.testing.compiled import compile_note

__all__ = [
    "CHECKS",
    "accepts",
    "check_all",
    "compile_notes",
    "check_attention",
    "check_attention_shapes",
    "check_score",
    "check_score_shapes",
    "projection_loss",
]


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


def check_all(name: str | None = None) -> list[tuple[str, str, str | None]]:
    """Run the kit on every registered score, and every attention with every score it accepts (the
    mechanisms without a score alone); or, given a score's or an attention's `name` (or alias), on what
    involves it: the score alone and inside every mechanism that accepts it, the mechanism with every
    score it accepts. Returns (kind, name, error message or None); an unknown name raises RegistryError
    listing the names there are."""
    results = []
    for kind, label, cls, score in _involving(name):
        check = check_score if kind == "score" else check_attention
        results.append((kind, label, _error_of(check, cls, *([score] if score else []))))
    return results


def compile_notes(name: str | None = None) -> dict[str, str]:
    """For each attention (with each score) `check_all(name)` checks that the rnn decoder's compiled
    region would host: 'compiles', or 'runs eager under compile: <why>' (`compiled.compile_note`)."""
    notes = {}
    for kind, label, cls, score in _involving(name):
        if kind != "attention":
            continue
        try:
            note = compile_note(_attention(cls, score, {}))
        except Exception:  # a mechanism that cannot be built or called: check_all's failure says why
            continue
        if note is not None:
            notes[label] = note
    return notes


def _involving(name: str | None) -> list[tuple[str, str, Any, str | None]]:
    """(kind, label, class, score name or None) of every score and attention-with-score pair the kit
    checks for `name` (`check_all`)."""
    load_all()
    scores, attentions = registry("score").names(), registry("attention").names()
    named = {}  # kind -> the registered name `name` stands for
    if name is not None:
        named = {
            kind: registry(kind).canonical(name) for kind in ("score", "attention") if name in registry(kind)
        }
        if not named:
            close = difflib.get_close_matches(name, [*scores, *attentions], n=1, cutoff=0.4)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise RegistryError(
                f"unknown score or attention '{name}'{hint}; scores: {', '.join(scores)}; attentions: "
                f"{', '.join(attentions)}"
            )

    def involved(mechanism: str | None, score: str | None) -> bool:
        """Whether the pair involves the named plugin (everything does when none is named); a name that
        is both a score and an attention (`dot`) involves what either involves."""
        return name is None or named.get("attention") == mechanism or named.get("score") == score

    pairs: list[tuple[str, str, Any, str | None]] = [
        ("score", s, registry("score").get(s), None) for s in scores if involved(None, s)
    ]
    for mechanism in attentions:
        cls: type[Attention] = registry("attention").get(mechanism)
        if cls.default_score is None:
            if involved(mechanism, None):
                pairs.append(("attention", mechanism, cls, None))
            continue
        for score in scores:
            if accepts(cls, registry("score").get(score)) and involved(mechanism, score):
                pairs.append(("attention", f"{mechanism} score={score}", cls, score))
    return pairs


def _attention(
    cls: type[Attention], score: str | ScoreFactory | None, hyperparams: dict[str, Any]
) -> Subject:
    """The subject for `cls` with `score` (a registered name, a factory or None), labelled for messages."""
    factory: ScoreFactory | None
    if isinstance(score, str):
        load_all()
        factory, named = registry("score").get(score), score
    else:
        factory, named = score, getattr(score, "__name__", str(score))
    label = f"attention {cls.__name__}" + ("" if score is None else f" with score {named}")
    return Subject(cls, factory, hyperparams, label, uses_positions=_uses_positions(cls, factory))


def _uses_positions(cls: type[Attention], factory: ScoreFactory | None) -> bool:
    """The `uses_positions` flag of the score `cls` gets: a Score class's (or a partial's of one), its
    default score's, or that of the score a factory function builds."""
    if factory is None:
        if not cls.default_score:
            return False
        try:
            factory = registry("score").get(cls.default_score)
        except RegistryError:  # an unknown default fails construction, under the first check
            return False
    target = factory
    while isinstance(target, partial):
        target = target.func
    if isinstance(target, type):
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
        settings = [setting for setting in SETTINGS if check.settings(setting)]
        if not settings:
            continue
        try:
            with _one_thread():
                for setting in settings:
                    check.run(subject, setting)
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
