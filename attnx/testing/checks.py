"""Every check of the kit by name, in the order they run: the contract's (`contract`), what a query may
see (`order`), whether what a mechanism returns is what it computes (`fidelity`), whether decoding keeps
the state it declares (`state`), and whether it computes the same compiled (`compiled`)."""

from __future__ import annotations

from attnx.testing import compiled, contract, fidelity, order, state
from attnx.testing.base import Check

ORDER = (
    "flags",
    "shapes",
    "single_key",
    "weights",
    "masking",
    "fast_path",
    "prepare",
    "batch",
    "queries",
    "padding",
    "finiteness",
    "causality",
    "permutation",
    "weights_used",
    "gradients",
    "precision",
    "cached_decoding",
    "state",
    "reference",
    "compiled",
)

_ALL = {
    check.name: check
    for check in (*contract.CHECKS, *order.CHECKS, *fidelity.CHECKS, *state.CHECKS, *compiled.CHECKS)
}
CHECKS: dict[str, Check] = {name: _ALL[name] for name in ORDER}
