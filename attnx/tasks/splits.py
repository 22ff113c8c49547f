"""Fixed train/val/test splits of a fixed corpus by a stable hash of each example's key.

A corpus split by hash keeps every example with the same key (one word's pronunciations, one
sentence's duplicates) in one split, gives the same split on every machine, run and seed (so
seeds vary only the model), and stays put when the corpus grows. Each split is ordered by the
same hash, a fixed shuffle, so capping a split to its first n examples takes a random subset.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import TypeVar

from attnx.tasks.base import SPLITS, check

T = TypeVar("T")


def hash_fraction(key: str) -> float:
    """A key's fixed position in [0, 1); unlike `hash()` of a str it does not change per process."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2**64


def check_fractions(val_fraction: float, test_fraction: float) -> None:
    check("val_fraction", val_fraction, 0 < val_fraction < 1, "in (0, 1)")
    check("test_fraction", test_fraction, 0 < test_fraction < 1 - val_fraction, "in (0, 1 - val_fraction)")


def hash_splits(
    items: Iterable[T], key: Callable[[T], str], val_fraction: float, test_fraction: float
) -> dict[str, list[T]]:
    """test = keys hashed below `test_fraction`, val = the next `val_fraction`, train = the rest."""
    ranked = sorted(
        ((hash_fraction(key(item)), i, item) for i, item in enumerate(items)), key=lambda r: r[:2]
    )
    bounds = {"test": test_fraction, "val": test_fraction + val_fraction, "train": 1.0}
    out: dict[str, list[T]] = {split: [] for split in SPLITS}
    for u, _, item in ranked:
        out[next(split for split in ("test", "val", "train") if u < bounds[split])].append(item)
    return out


def check_caps(**sizes: int | None) -> None:
    for field, size in sizes.items():
        check(field, size, size is None or size >= 1, ">= 1, or null for the whole split")


def capped(splits: dict[str, list[T]], sizes: dict[str, int | None]) -> dict[str, list[T]]:
    """The first `sizes[split]` items of each split; a size of None keeps them all."""
    return {split: items[: sizes[split]] for split, items in splits.items()}
