"""Decoding one token at a time through a causal self-attention site's `KVCache`, as a decoder does, for the
checks of what decoding computes (`cached_decoding`) and keeps (`state`). The first pass, on a site fresh
from construction, is made once per setting (`decoded`) and its steps' outputs and cache sizes recorded;
the `state` check then decodes again on the same site, reordering the batch as beam search does."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from attnx.nn.attention import stored
from attnx.nn.positions import Positions
from attnx.nn.transformer import AttentionSite, KVCache
from attnx.testing.calls import construct
from attnx.testing.cases import Setting, Subject, edges, key_mask, prepared_for, random_sequence
from attnx.testing.purity import module_state

REORDER_AT = 2  # the state check reorders the batch (`beams`) after this many decoding steps

Output = tuple[torch.Tensor, torch.Tensor | None]


class Step(NamedTuple):
    """A decoding step: token t's index, its description for messages, the cache after it, and the
    batch's inputs and mask (reordered from REORDER_AT on, in a pass that reorders)."""

    t: int
    when: str
    cache: KVCache
    x: torch.Tensor
    mask: torch.Tensor


@dataclass
class Decoded:
    """The first pass: the site (which the `state` check decodes on again), the batch, what each compared
    step returned with and without weights, the numbers its cache held per sequence after n tokens, and
    what the site held before it decoded anything."""

    site: AttentionSite
    x: torch.Tensor
    mask: torch.Tensor
    outputs: dict[int, tuple[Output, Output]]  # t -> (need_weights=True, need_weights=False)
    held: dict[int, float]  # n -> numbers per sequence
    before: dict[str, Any]  # `module_state` of the site


def compared(setting: Setting) -> list[int]:
    """The steps whose outputs are compared: the first, and each at a block edge (`edges`)."""
    return sorted({0, *edges(setting.tk)})


def counted(setting: Setting) -> list[int]:
    """The n after which the cache is counted: 1, and n = t + 1 for the edges t (windows and blocks end)."""
    return sorted({1, *(t + 1 for t in edges(setting.tk))})


def decoded(subject: Subject, setting: Setting) -> Decoded:
    """The first pass over the setting's random batch, made once."""
    key = ("decoded", setting)
    if key not in subject.memo:
        site = causal_site(subject, setting)
        before = module_state(site)
        x, mask = random_sequence(setting, subject.self_dim), key_mask(setting.lengths)
        outputs, held = {}, {}
        at, count = set(compared(setting)), set(counted(setting))
        with torch.no_grad():  # decoding is inference
            for step in decoding(site, setting, x, mask, reorder=False):
                if step.t in at:
                    outputs[step.t] = step_outputs(site, step, setting)
                if step.t + 1 in count:
                    held[step.t + 1] = stored((step.cache.inputs, step.cache.prepared)) / setting.batch
        subject.memo[key] = Decoded(site, x, mask, outputs, held, before)
    return subject.memo[key]


def step_outputs(site: AttentionSite, step: Step, setting: Setting) -> tuple[Output, Output]:
    """What the site returns for token t's query from the cache after it, with and without weights."""
    t = step.t
    at = Positions(Positions.span(1, start=t), Positions.span(t + 1), True)
    with stepping(step.when, setting):
        return site(step.x[:, t : t + 1], step.cache.prepared, at, True), site(
            step.x[:, t : t + 1], step.cache.prepared, at, False
        )


def decoding(
    site: AttentionSite, setting: Setting, x: torch.Tensor, mask: torch.Tensor, reorder: bool
) -> Iterator[Step]:
    """x [B, T, D] (mask [B, T]) fed to `site.cache` one token at a time, as a decoder does; with `reorder`,
    the batch reordered by `beams` after REORDER_AT steps (`KVCache.select`, as beam search does). Each token
    is a fresh tensor, as a decoder's normed input is: a view would hold the whole sequence's storage."""
    cache: KVCache | None = None
    for t in range(setting.tk):
        if reorder and t == REORDER_AT:
            assert cache is not None  # REORDER_AT > 0: a step has filled it
            index = beams(setting)
            with stepping(f"KVCache.select({index.tolist()}) after step t={t - 1}", setting):
                cache = cache.select(index)
            x, mask = x[index], mask[index]
        reordered = (
            f", after KVCache.select({beams(setting).tolist()})" if reorder and t >= REORDER_AT else ""
        )
        when = f"step t={t}{reordered}"
        with stepping(when, setting):
            cache = site.cache(x[:, t : t + 1].clone(), mask[:, t : t + 1], cache)
        yield Step(t, when, cache, x, mask)


def beams(setting: Setting) -> torch.Tensor:
    """How the `state` check reorders the setting's batch, as beam search does: here the rows reversed. A
    permutation, not a repeat: a mechanism whose output depends on the rest of the batch (which `batch`
    fails) then still sees the same batch, and only a past left behind by the reorder shows."""
    return torch.arange(setting.batch).flip(0)


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
    dims = ((subject.self_dim,) * 3,)
    site = construct(lambda *dims: AttentionSite(mechanism, dims[0], "causal"), dims)[0]
    return prepared_for(site, setting)
