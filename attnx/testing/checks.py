"""Every check of the kit by name, in the order they run: the contract's (`contract`), eval's purity
(`purity`), what a query may see (`order`), whether what a mechanism returns is what it computes
(`fidelity`) and its gradient the derivative (`gradients`), whether every hyperparameter does something
(`hyperparameters`), whether decoding keeps the state it declares (`state`), and whether it computes the
same compiled (`compiled`). A check that compares calls runs after `purity`, so that a mechanism whose
output depends on the random generators is named for that, not for what the comparison saw."""

from __future__ import annotations

from attnx.testing import compiled, contract, fidelity, gradients, hyperparameters, order, purity, state
from attnx.testing.base import Check

ORDER = (
    "flags",
    "shapes",
    "single_key",
    "purity",
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
    "parameters",
    "hyperparameters",
    "precision",
    "cached_decoding",
    "state",
    "reference",
    "compiled",
)

_ALL = {
    check.name: check
    for module in (contract, purity, order, fidelity, gradients, hyperparameters, state, compiled)
    for check in module.CHECKS
}
CHECKS: dict[str, Check] = {name: _ALL[name] for name in ORDER}
