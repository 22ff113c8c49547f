"""Every check of the kit by name, in the order they run: the contract's (`contract`), what a query may
see (`order`), and whether what a mechanism returns is what it computes (`fidelity`)."""

from __future__ import annotations

from attnx.testing import contract, fidelity, order
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
    "reference",
)

_ALL = {check.name: check for check in (*contract.CHECKS, *order.CHECKS, *fidelity.CHECKS)}
CHECKS: dict[str, Check] = {name: _ALL[name] for name in ORDER}
