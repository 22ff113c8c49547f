"""Running the kit's checks on one subject: each check where the capability flags promise it, in the settings
where it can tell something, on one torch thread; the first failure raised as one line that names the
check, the property it holds the plugin to, the subject, the call and setting, and the evidence."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

import torch

from attnx.nn.attention import Attention
from attnx.nn.scores import ScoreFactory, build_score
from attnx.registry import RegistryError, load_all, registry
from attnx.testing.cases import SELF_DIM, SETTINGS, Subject
from attnx.testing.checks import CHECKS


def run_checks(subject: Subject, checks: Iterable[str] | None) -> list[str]:
    """Run the named checks (all by default) that apply to `subject`; the first failure raises
    AssertionError("<check> (<property>): <label> (<call>): <evidence>"). Returns the names of the checks
    that ran."""
    names = list(CHECKS) if checks is None else list(checks)
    unknown = [name for name in names if name not in CHECKS]
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; available: {', '.join(CHECKS)}")
    if subject.uses_positions and not subject.cls.takes_positions:
        return []  # not a legal combination: a site would never give the score its positions
    ran = []
    for name in names:
        check = CHECKS[name]
        if name in subject.skip or not check.applies(subject):
            continue
        settings = [setting for setting in SETTINGS if check.settings(setting)]
        if not settings:
            continue
        named = f"{name} ({check.property}): {subject.label}"
        try:
            with one_thread():
                for setting in settings:
                    check.run(subject, setting)
        except AssertionError as error:
            detail = str(error)
            raise AssertionError(f"{named}{'' if detail.startswith('(') else ':'} {detail}") from error
        except Exception as error:  # a crash inside a check is that check's failure
            raise AssertionError(f"{named}: {type(error).__name__}: {error}") from error
        ran.append(name)
    return ran


def attention_subject(
    cls: type[Attention],
    score: str | ScoreFactory | None,
    hyperparams: dict[str, Any],
    dims: tuple[int, int, int] | None = None,
) -> Subject:
    """The subject for `cls` with `score` (a registered name, a factory or None for its default), labelled
    for messages, at the kit's dims or at `dims`."""
    factory: ScoreFactory | None
    if isinstance(score, str):
        load_all()
        factory, named = registry("score").get(score), score
    else:
        factory, named = score, score_label(score)
    label = f"attention {cls.__name__}" + ("" if score is None else f" with score {named}")
    return Subject(cls, factory, hyperparams, label, uses_positions=uses_positions(cls, factory), dims=dims)


def score_label(factory: ScoreFactory | None) -> str:
    """A score factory as a message names it: its class, with the hyperparameters a partial binds."""
    bound: dict[str, Any] = {}
    target: Any = factory
    while isinstance(target, partial):
        bound = {**target.keywords, **bound}
        target = target.func
    name = getattr(target, "__name__", str(target))
    return f"{name}({', '.join(f'{k}={v}' for k, v in bound.items())})" if bound else name


def uses_positions(cls: type[Attention], factory: ScoreFactory | None) -> bool:
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


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """One torch thread: on tensors this small, a thread pool only adds overhead (100x on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
