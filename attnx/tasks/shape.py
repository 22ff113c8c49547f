"""What a task's data is like in length, and what a model reads of it: each split's longest sequence
(`Shape`, declared by a task whose arguments bound it, else measured on its built data), each model part's
limit (`Reader`), and the check between them (`check_fit`), which a run makes before its first batch."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnx.tasks.base import PaddedSplit


@dataclass(frozen=True)
class Shape:
    """The longest sequence of each split, in tokens: its sources', and its targets' (BOS and EOS counted)
    where the examples have target sequences."""

    source: dict[str, int]
    target: dict[str, int] | None = None

    @classmethod
    def of(cls, splits: dict[str, PaddedSplit]) -> Shape:
        """Measured on built splits (empty ones left out)."""
        filled = {split: data for split, data in splits.items() if len(data)}
        target = {s: int(d.tgt_len.max()) for s, d in filled.items() if d.tgt_len is not None}
        return cls({s: int(d.src_len.max()) for s, d in filled.items()}, target or None)


@dataclass(frozen=True)
class Reader:
    """A model part that reads at most `max_len` tokens (its positional table, or its own limit): of the
    source, or (`steps`) of a decoder's steps: its teacher-forced targets, and at val and test up to
    `decode_ratio` x the source + 5 decoded tokens. `section` names it in config (`encoder`, `lm`)."""

    section: str
    max_len: int
    what: str  # "source", "sequence", "decoder steps (targets, or decoding)"
    steps: bool = False
    decode_ratio: float = 0.0

    def needs(self, shape: Shape) -> dict[str, int]:
        """The tokens this part reads of each split."""
        if not self.steps:
            return dict(shape.source)
        targets = shape.target or {}
        decoded = {s: int(self.decode_ratio * n) + 5 for s, n in shape.source.items() if s != "train"}
        return {s: max(targets.get(s, 1) - 1, decoded.get(s, 0)) for s in shape.source}


def check_fit(readers: Iterable[Reader], shape: Shape, task: str) -> None:
    """Every split's longest sequence fits each reader's `max_len` (a self-attention encoder refuses longer
    inputs; a position table has no row past it), else a ValueError naming the key to raise or what to
    shorten: otherwise it would fail once training started."""
    for reader in readers:
        needs = reader.needs(shape)
        if not needs:
            continue
        split, longest = max(needs.items(), key=lambda item: item[1])
        if longest > reader.max_len:
            # a test slice (`test@4x`) is as long as task.test_slices asks
            shorten = "lower task.test_slices" if "@" in split else "shorten the task"
            key = f"{reader.section}.max_len"
            raise ValueError(
                f"{key}={reader.max_len}: the {split} split of task={task} needs {longest} tokens of "
                f"{reader.what}; raise {key} to at least {longest} or {shorten}"
            )
