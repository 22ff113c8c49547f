"""The kit at a run's values: every plugin mechanism and score of a run's attention sites checked whole, with
the hyperparameters the run configures and at the dims its model gives each site, before it trains
(`attnx.config.validation.check_plugins` calls `check_run`). Shipped and user plugins alike; the built-ins
are held to the kit by attnx's own tests."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from typing import Any

from attnx.nn.attention import Attention, Mechanism
from attnx.nn.scores import ScoreFactory
from attnx.registry import KINDS, registry
from attnx.testing.run import attention_subject, run_checks, score_label

_passed: set[tuple[Any, ...]] = set()  # the sites `check_site` has passed in this process


def check_site(
    cls: type[Attention],
    score: ScoreFactory | None,
    hyperparams: dict[str, Any],
    dims: tuple[int, int, int],
    checks: Iterable[str] | None = None,
) -> list[str]:
    """The whole kit (or `checks`) on a mechanism as a run builds it at one of its sites: with its score
    factory and hyperparameters as configured, at the site's (query, key, value) dims, every hyperparameter
    of both varied. A site it passed is not checked again in the process (a sweep's jobs, `attnx compare`'s
    arms). Returns the checks that ran."""
    names = None if checks is None else tuple(checks)
    key = (cls, score_label(score), repr(sorted(hyperparams.items())), dims, names)
    if key in _passed:
        return []
    ran = run_checks(attention_subject(cls, score, hyperparams, dims), names)
    _passed.add(key)
    return ran


def check_run(sites: Mapping[str, Any], build: Callable[[], Any]) -> None:
    """`check_site` on every site of `sites` (key -> `models.sites.Site`) whose mechanism or score is a
    plugin, at the dims `build()` (the run's model, built without data) gives it; nothing is built when
    every site is built-in. The first failure raises AssertionError naming the site and the command that
    repeats the check: `<key>=<name>: ... (attnx plugins check NAME KEY=VALUE ...): <the kit's line>`."""
    plugins = {key: site for key, site in sites.items() if uses_plugin(site.mechanism)}
    if not plugins:
        return
    with built_sites() as built:
        build()
    checked = set()
    for mechanism, dims in built:
        key, site = next(((k, s) for k, s in plugins.items() if s.mechanism is mechanism), (None, None))
        if site is None or (key, dims) in checked:  # an lm's layers build the same site alike
            continue
        checked.add((key, dims))
        try:
            check_site(mechanism.cls, mechanism.score, mechanism.hyperparams, dims)
        except AssertionError as error:
            raise AssertionError(
                f"{key}={site.attention}: fails the conformance kit at this run's values "
                f"({repeat(site, dims)}): {error}"
            ) from None


def repeat(site: Any, dims: tuple[int, int, int]) -> str:
    """The `attnx plugins check` command that checks the site's plugin at its values: the mechanism when it
    is a plugin, else the score."""
    mechanism, name = site.mechanism, site.attention
    values = [f"attention.{k}={v}" for k, v in mechanism.hyperparams.items()]
    if isinstance(mechanism.score, partial):
        values += [f"score.{k}={v}" for k, v in mechanism.score.keywords.items()]
    if not is_plugin(mechanism.cls) and site.score is not None:
        name = site.score
    width = f" d_model={dims[0]}" if len(set(dims)) == 1 else ""
    return f"attnx plugins check {name} {' '.join(values)}{width}".replace("  ", " ").strip()


def uses_plugin(mechanism: Mechanism) -> bool:
    """Whether a site's mechanism or its score is a plugin (shipped with attnx or the user's)."""
    return is_plugin(mechanism.cls) or is_plugin(_score_class(mechanism.score))


def is_plugin(cls: type | None) -> bool:
    """Whether `cls` is not one of attnx's built-ins: registered from a plugin, or not registered at all."""
    if cls is None:
        return False
    for kind in KINDS:
        for name in registry(kind).names():
            entry = registry(kind).entry(name)
            if entry.cls is cls:
                return entry.origin != "built-in"
    return True


def _score_class(factory: Any) -> type | None:
    while isinstance(factory, partial):
        factory = factory.func
    return factory if isinstance(factory, type) else None


@contextlib.contextmanager
def built_sites() -> Iterator[list[tuple[Mechanism, tuple[int, int, int]]]]:
    """Inside, every `Mechanism` a model builds is recorded with the (query, key, value) dims it is built
    at: a site's dims are its host's to choose (d_model, an rnn decoder's hidden size, the encoder's
    width), and building the model is how to know them without repeating each host's rule."""
    seen: list[tuple[Mechanism, tuple[int, int, int]]] = []
    build = Mechanism.__call__

    def recorded(self: Mechanism, query_dim: int, key_dim: int, value_dim: int) -> Attention:
        seen.append((self, (query_dim, key_dim, value_dim)))
        return build(self, query_dim, key_dim, value_dim)

    Mechanism.__call__ = recorded  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        Mechanism.__call__ = build  # type: ignore[method-assign]
