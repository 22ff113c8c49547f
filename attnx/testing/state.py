"""The `state` check: what decoding keeps is what the mechanism declares. A causal self-attention site
decodes one token at a time through its `KVCache`; after n tokens the numbers it holds per sequence (the
floating tensors of `prepared`, and of the inputs a mechanism that re-prepares leaves there, each storage
counted once and whole) must equal `KVCache.state_size`: the mechanism's `Attention.state_size(n)`, plus
the n·D inputs when the site keeps them. That declaration is the state axis of MAD (Poli et al. 2024,
"Mechanistic Design and Scaling of Hybrid Architectures") and Zoology (Arora et al. 2024, "Zoology:
Measuring and Improving Recall in Efficient Language Models"): softmax's cache grows as 2·n·D, a
recurrent state or a window does not, and `attnx bench` reports it."""

from __future__ import annotations

from attnx.nn.attention import stored
from attnx.nn.transformer import KVCache
from attnx.testing.base import Check, causal, registrar, require
from attnx.testing.cases import LONG, Setting, Subject, edges, key_mask, random_sequence
from attnx.testing.order import causal_site, decoding

CHECKS: list[Check] = []
check = registrar(CHECKS)


@check("state", applies=causal, settings=lambda setting: setting.lengths == LONG)
def _state(subject: Subject, setting: Setting) -> None:
    """After n = 1, 2, 3, 17, 18, 33, 34, 65, 66, 67 tokens (windows and blocks of 16, 32, 64 end there),
    also after a beam-search reorder, the cache holds what the mechanism declares."""
    site = causal_site(subject, setting)
    mechanism, where = site.mechanism, f"(causal self-attention; {setting}, float64)"
    name = type(mechanism).__name__
    require(
        mechanism.state_size(1) is not None,
        f"{where}: {name}.state_size(n) returns None: declare the numbers (tensor elements, all heads) "
        "your cache keeps per sequence to decode after n tokens by overriding `Attention.state_size`; a "
        "K/V cache of width D keeps 2·n·D (`return 2 * n * self.query_dim`), a recurrent state a constant",
    )
    counted = {1, *(t + 1 for t in edges(setting.tk))}
    found = {}
    for step in decoding(site, setting, random_sequence(setting), key_mask(setting.lengths)):
        n = step.t + 1
        if n in counted:
            found[n] = stored((step.cache.inputs, step.cache.prepared)) / setting.batch
    declared = {n: KVCache.state_size(mechanism, n) for n in found}
    wrong = [
        f"n={n}: declared {declared[n]}, found {held:g}" for n, held in found.items() if held != declared[n]
    ]
    inputs = (
        "" if mechanism.incremental else f" + the n·{mechanism.key_dim} inputs the site keeps to re-prepare"
    )
    require(
        not wrong,
        f"{where}: decoding token by token, the site's cache holds other numbers per sequence than "
        f"{name}.state_size(n){inputs} declares (the floating tensors it keeps, each storage once and "
        f"whole): {'; '.join(wrong)}",
    )
