"""The kit over the registry (`attnx plugins check [NAME] [key=value ...]`): which scores and mechanism-score
pairs to check for a name, at which values, and whether each mechanism compiles.

For a score: the score alone and inside every mechanism that hosts it; for a mechanism: the mechanism with
every score it accepts (alone when it takes none); for no name, every one of both. `attention.*` values
apply to each checked mechanism that takes them, `score.*` values to each checked score that does. A
mechanism's hyperparameters are varied (the `hyperparameters` check) once, with its default score; a
score's alone. Checking every plugin, the `compiled` check runs on each score alone and on each mechanism
with its default score: a score that computes otherwise when traced does so in softmax attention too,
and tracing every pair again would double the kit's time."""

from __future__ import annotations

import difflib
from functools import partial
from typing import Any, NamedTuple

from attnx.nn.attention import Attention
from attnx.nn.classic import SoftmaxAttention
from attnx.nn.scores import Score
from attnx.registry import STRUCTURAL, RegistryError, init_parameters, load_all, registry
from attnx.testing.cases import Subject
from attnx.testing.compiled import compile_note
from attnx.testing.run import attention_subject, run_checks


class Pair(NamedTuple):
    """What one line of `attnx plugins check` checks: a score alone, or a mechanism with a score."""

    kind: str  # "score" or "attention"
    label: str  # "cosine", "multi_head score=cosine"
    subject: Subject


def accepts(cls: type[Attention], score: type[Score]) -> bool:
    """Whether `cls` can host `score`: a score that uses positions needs a mechanism that takes them."""
    return cls.default_score is not None and (cls.takes_positions or not score.uses_positions)


def hyperparameters(kind: str, cls: type) -> list[str]:
    """The arguments a config may set for a class of `kind` (its constructor's, less the structural)."""
    return [p.name for p in init_parameters(cls) if p.name not in STRUCTURAL[kind]]


def score_subject(
    cls: type[Score], hyperparams: dict[str, Any], dims: tuple[int, int, int] | None = None
) -> Subject:
    """The subject for a score alone: inside plain softmax attention, softmax(f(q, K)) V, which is causal
    and passes positions."""
    return Subject(
        SoftmaxAttention,
        partial(cls, **hyperparams),
        {},
        f"score {cls.__name__}",
        uses_positions=cls.uses_positions,
        score_cls=cls,
        score_hyperparams=hyperparams,
        dims=dims,
        vary=("score",),
    )


def pairs(
    name: str | None = None,
    values: dict[str, dict[str, Any]] | None = None,
    dims: tuple[int, int, int] | None = None,
) -> list[Pair]:
    """Every score and mechanism-score pair the kit checks for `name` (all of them for None), at `values`
    ({"attention": {...}, "score": {...}}) and `dims`; an unknown name raises RegistryError listing the
    names there are."""
    load_all()
    values = values or {}
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

    def bound(kind: str, cls: type) -> dict[str, Any]:
        """The `values` of `kind` that `cls` takes."""
        takes = hyperparameters(kind, cls)
        return {key: value for key, value in values.get(kind, {}).items() if key in takes}

    found = []
    for score in scores:
        if name is None or named.get("score") == score:
            cls = registry("score").get(score)
            found.append(Pair("score", score, score_subject(cls, bound("score", cls), dims)))
    for mechanism in attentions:
        cls = registry("attention").get(mechanism)
        own = name is None or named.get("attention") == mechanism  # NAME is the mechanism, or none named
        if cls.default_score is None:
            if own:
                found.append(Pair("attention", mechanism, _subject(cls, None, bound, dims, vary=True)))
            continue
        for score in scores:
            score_cls = registry("score").get(score)
            if accepts(cls, score_cls) and (own or named.get("score") == score):
                factory = partial(score_cls, **bound("score", score_cls))
                subject = _subject(
                    cls, (score, factory), bound, dims, vary=own and score == cls.default_score
                )
                if name is None and score != cls.default_score:
                    subject.skip = ("compiled",)
                found.append(Pair("attention", f"{mechanism} score={score}", subject))
    return found


def _subject(
    cls: type[Attention], score: tuple[str, Any] | None, bound: Any, dims: Any, vary: bool
) -> Subject:
    subject = attention_subject(cls, None if score is None else score[1], bound("attention", cls), dims)
    if score is not None:
        subject.label = f"attention {cls.__name__} with score {score[0]}"
    subject.vary = ("attention",) if vary else ()
    return subject


def check_all(
    name: str | None = None,
    values: dict[str, dict[str, Any]] | None = None,
    dims: tuple[int, int, int] | None = None,
) -> list[tuple[str, str, str | None]]:
    """Run the kit on every pair `pairs(name, values, dims)` lists. Returns (kind, label, the failure's
    message or None)."""
    return [(pair.kind, pair.label, _error_of(pair.subject)) for pair in pairs(name, values, dims)]


def compile_notes(
    name: str | None = None,
    values: dict[str, dict[str, Any]] | None = None,
    dims: tuple[int, int, int] | None = None,
) -> dict[str, str]:
    """For each mechanism (with each score) `check_all` checks that the rnn decoder's compiled region would
    host: 'compiles', or 'runs eager under compile: <why>' (`compiled.compile_note`, which reads what the
    `compiled` check found when it ran)."""
    notes = {}
    for pair in pairs(name, values, dims):
        if pair.kind != "attention" or "compiled" in pair.subject.skip:
            continue
        try:
            note = compile_note(pair.subject)
        except Exception:  # a mechanism that cannot be built or called: check_all's failure says why
            continue
        if note is not None:
            notes[pair.label] = note
    return notes


def _error_of(subject: Subject) -> str | None:
    try:
        run_checks(subject, None)
    except Exception as error:  # a crash is a failure to report, not a reason to stop
        return str(error) if isinstance(error, AssertionError) else f"{type(error).__name__}: {error}"
    return None
