"""The `state` check: decoding state is state. Whatever a causal mechanism keeps to decode lives in the cache
it returns (`prepare`/`extend`), batch-first: so it survives a beam-search reorder (`KVCache.select`),
starts fresh for every new batch, and leaves the module as it was; and it is what the mechanism declares,
`Attention.state_size(n)`.

The declaration is counted: after n tokens the numbers a site's cache holds per sequence (the floating
tensors of `prepared`, and of the inputs a mechanism that re-prepares leaves there, each storage counted
once and whole) must equal `KVCache.state_size`: the mechanism's `state_size(n)`, plus the n·D inputs when
the site keeps them. That declaration is the state axis of MAD (Poli et al. 2024, "Mechanistic Design and
Scaling of Hybrid Architectures") and Zoology (Arora et al. 2024, "Zoology: Measuring and Improving Recall
in Efficient Language Models"): softmax's cache grows as 2·n·D, a recurrent state or a window does not,
and `attnx bench` reports it."""

from __future__ import annotations

import torch

from attnx.nn.transformer import KVCache
from attnx.testing.base import CACHE_ATOL, STATE, Check, causal, registrar, require
from attnx.testing.calls import max_gap, select
from attnx.testing.cases import LONG, Setting, Subject
from attnx.testing.decoding import REORDER_AT, beams, decoded, decoding, step_outputs
from attnx.testing.purity import module_changes

CHECKS: list[Check] = []
check = registrar(CHECKS)


@check("state", STATE, applies=causal, settings=lambda setting: not setting.train)
def _state(subject: Subject, setting: Setting) -> None:
    """Decoding the batch again on the same site, reordered by `KVCache.select` after REORDER_AT steps,
    gives each step what the first pass gave the rows it picked: nothing of the first batch is left in the
    module, which decoding leaves as it found it. In the long setting, after n = 1, 2, 3, 17, 18, 33, 34,
    65, 66, 67 tokens (windows and blocks of 16, 32, 64 end there) the first pass's cache held what the
    mechanism declares."""
    first = decoded(subject, setting)
    name = type(first.site.mechanism).__name__
    where = f"(causal self-attention; {setting}, float64)"
    if setting.lengths == LONG:
        _declared(first.site.mechanism, first.held, where)
    index = beams(setting)
    with torch.no_grad():  # decoding is inference
        again = {
            step.t: (step, step_outputs(first.site, step, setting))
            for step in decoding(first.site, setting, first.x, first.mask, reorder=True)
            if step.t in first.outputs
        }
    for t, (step, outputs) in again.items():
        rows = index if t >= REORDER_AT else None
        reordered = " and reordering it" if rows is not None else ""
        for need_weights, was, now in zip((True, False), first.outputs[t], outputs):
            expected = was if rows is None else tuple(select(x, rows) for x in was)
            gap = max_gap(expected, now, step.mask[:, t : t + 1])
            require(
                gap < CACHE_ATOL,
                f"(causal self-attention, {step.when}; {setting}, float64, need_weights={need_weights}): "
                f"decoding the batch again on the same site{reordered} gives another output than the first "
                f"pass gave {'those rows' if rows is not None else 'it'} (max diff {gap:.3g}): {name} keeps "
                "decoding state outside the cache it returns, or in a tensor that is not batch-first, so "
                "beam search and a second batch see another sequence's past",
            )
    changed = module_changes(first.before, first.site)
    require(
        not changed,
        f"{where}: decoding changed the site's modules: {'; '.join(changed)}; what decoding keeps belongs "
        "in the cache that prepare and extend return, which beam search reorders and a new batch replaces",
    )


def _declared(mechanism: object, held: dict[int, float], where: str) -> None:
    """The cache held per sequence what the mechanism declares (`KVCache.state_size`) at every counted n."""
    name = type(mechanism).__name__
    require(
        mechanism.state_size(1) is not None,  # type: ignore[attr-defined]
        f"{where}: {name}.state_size(n) returns None: declare the numbers (tensor elements, all heads) "
        "your cache keeps per sequence to decode after n tokens by overriding `Attention.state_size`; a "
        "K/V cache of width D keeps 2·n·D (`return 2 * n * self.query_dim`), a recurrent state a constant",
    )
    declared = {n: KVCache.state_size(mechanism, n) for n in held}  # type: ignore[arg-type]
    wrong = [
        f"n={n}: declared {declared[n]}, found {found:g}" for n, found in held.items() if found != declared[n]
    ]
    inputs = (
        ""
        if mechanism.incremental  # type: ignore[attr-defined]
        else f" + the n·{mechanism.key_dim} inputs the site keeps to re-prepare"  # type: ignore[attr-defined]
    )
    require(
        not wrong,
        f"{where}: decoding token by token, the site's cache holds other numbers per sequence than "
        f"{name}.state_size(n){inputs} declares (the floating tensors it keeps, each storage once and "
        f"whole): {'; '.join(wrong)}",
    )
