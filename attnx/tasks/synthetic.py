"""Algorithmic seq2seq tasks generated with tensor ops: copy, reverse, sort, addition.

Train and val draw lengths from [min_len, max_len]; test from [test_min_len, test_max_len], so
training on 5-20 and testing on 20-40 measures length generalisation (Bahdanau et al. 2015 show
fixed-context models degrade with length). `val_like_test` draws val from the test lengths instead,
so that checkpoint selection and early stopping follow what the test measures. Val and test never
repeat a source of an earlier split.

`test_slices` adds a split per multiple k (`test@{k}x`): `test_size` sources with lengths in
(⌊k/2 · max⌋, k · max], max the longest training length (k = 2 with max 12: 13-24), each from its own
stream and unseen in every other split, so the headline `test` stays in its own range and each
extrapolation band is a metric of its own (in-distribution and longer test lengths apart, as in Anil
et al. 2022, "Exploring Length Generalization in Large Language Models").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from attnx.registry import register_task
from attnx.tasks.base import PaddedSplit, SizedTask, check, check_lengths, check_slices, slice_name
from attnx.tasks.shape import Shape
from attnx.vocab import BOS, EOS, PAD, SPECIALS, Vocab

_FIRST_SYMBOL = len(SPECIALS)  # symbol i has id _FIRST_SYMBOL + i in every vocabulary here
_ROUNDS = 10  # rejection rounds when val/test must avoid earlier sources; more means the space is exhausted


def positions(width: int, lengths: Tensor) -> Tensor:
    """[N, width] mask of the real (non-PAD) positions of left-aligned sequences."""
    return torch.arange(width) < lengths[:, None]


def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse each row's first `lengths` entries in place of a flip, which would move PAD to the front."""
    index = (lengths[:, None] - 1 - torch.arange(x.shape[1])).clamp(min=0)
    return x.gather(1, index).masked_fill(~positions(x.shape[1], lengths), PAD)


def rows_in(rows: Tensor, table: Tensor) -> Tensor:
    """[N] bool: whether each PAD-padded row of `rows` equals some row of `table` (widths may differ)."""
    width = max(rows.shape[1], table.shape[1])
    both = torch.cat([_pad_to(rows, width), _pad_to(table, width)])
    _, ids = torch.unique(both, dim=0, return_inverse=True)
    return torch.isin(ids[: len(rows)], ids[len(rows) :])


def draw_unseen(
    sample: Callable[[], tuple[Tensor, Tensor]], size: int, earlier: list[Tensor]
) -> tuple[Tensor, Tensor]:
    """Up to `size` rows of `sample()`'s first tensor, with the matching rows of its second (targets or
    lengths), none of them a row of an earlier split (no test leakage): drawn in up to `_ROUNDS` rounds,
    so fewer than `size` when the space is nearly exhausted, which the caller reports."""
    seen = torch.cat([_pad_to(s, max(s.shape[1] for s in earlier)) for s in earlier]) if earlier else None
    kept: list[tuple[Tensor, Tensor]] = []
    count = 0
    for _ in range(_ROUNDS):
        rows, other = sample()
        if seen is not None:
            fresh = ~rows_in(rows, seen)
            rows, other = rows[fresh], other[fresh]
        kept.append((rows, other))
        count += len(rows)
        if count >= size:
            break
    return torch.cat([k[0] for k in kept])[:size], torch.cat([k[1] for k in kept])[:size]


def _pad_to(x: Tensor, width: int) -> Tensor:
    return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=PAD)


def with_bos_eos(body: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Targets as the decoder sees them: BOS y1..yn EOS PAD..; lengths count BOS and EOS."""
    n, width = body.shape
    tgt = torch.full((n, width + 2), PAD, dtype=torch.long)
    tgt[:, 0] = BOS
    tgt[:, 1:-1] = body
    tgt[torch.arange(n), lengths + 1] = EOS
    return tgt, lengths + 2


class SyntheticSeq2Seq(SizedTask):
    """Seq2seq pairs sampled with torch: subclasses give `sample` and `target`, and their length
    arguments to `set_lengths`; `val_like_test`, the split sizes and Task's arguments come from here and
    SizedTask, which a subclass's config lists through its `**kwargs`.
    """

    model_type = "seq2seq"

    def __init__(
        self,
        val_like_test: bool = False,
        test_slices: tuple[int, ...] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.val_like_test = val_like_test
        self.test_slices = check_slices(test_slices)

    def set_lengths(
        self, unit: str, lengths: tuple[int, int], test_lengths: tuple[int | None, int | None]
    ) -> None:
        """The source length range of each split: `lengths` for train, `test_lengths` (each bound
        defaulting to train's) for test, and val's like test's with `val_like_test`, else like train's.
        `unit` names the length arguments (`min_{unit}`, `test_max_{unit}`, ...) in error messages."""
        test = tuple(train if test is None else test for test, train in zip(test_lengths, lengths))
        check_lengths(f"min_{unit}", lengths[0], f"max_{unit}", lengths[1])
        check_lengths(f"test_min_{unit}", test[0], f"test_max_{unit}", test[1])
        self.ranges = {"train": lengths, "val": test if self.val_like_test else lengths, "test": test}
        for k in self.test_slices:  # (⌊k/2 · max⌋, k · max]: beyond training, and beyond the slice before
            self.ranges[slice_name(k)] = (k * lengths[1] // 2 + 1, k * lengths[1])

    def sample(self, n: int, min_len: int, max_len: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """`n` random sources: (PAD-padded ids [n, W] with W fixed by max_len, lengths [n])."""
        raise NotImplementedError

    def longest(self, units: int) -> tuple[int, int]:
        """The most tokens of a source of at most `units` (symbols, digits) and of its target (without BOS
        and EOS)."""
        raise NotImplementedError

    def declared_shape(self) -> Shape:
        longest = {split: self.longest(high) for split, (_, high) in self.ranges.items()}
        return Shape({s: n for s, (n, _) in longest.items()}, {s: n + 2 for s, (_, n) in longest.items()})

    def target(self, src: Tensor, src_len: Tensor) -> tuple[Tensor, Tensor]:
        """The target of each source: (PAD-padded ids without BOS/EOS, lengths)."""
        raise NotImplementedError

    def build(self) -> dict[str, PaddedSplit]:
        splits: dict[str, PaddedSplit] = {}
        for split in self.split_names():
            earlier = [s.src for s in splits.values()]
            src, src_len = self._fresh_sources(split, earlier)
            tgt, tgt_len = with_bos_eos(*self.target(src, src_len))
            splits[split] = PaddedSplit(src, src_len, tgt, tgt_len)
        return splits

    def _fresh_sources(self, split: str, earlier: list[Tensor]) -> tuple[Tensor, Tensor]:
        """Sample the split's sources, rejecting any that an earlier split holds (no test leakage)."""
        size, (min_len, max_len), generator = self.sizes[split], self.ranges[split], self.generator(split)
        src, src_len = draw_unseen(lambda: self.sample(size, min_len, max_len, generator), size, earlier)
        if len(src) < size:
            raise ValueError(
                f"task.{self.size_key(split)}={size} is invalid: only {len(src)} sources of length "
                f"{min_len}-{max_len} ({split}) "
                "unseen in earlier splits were found; lower the size or widen the lengths"
            )
        return src, src_len


class SymbolSequenceTask(SyntheticSeq2Seq):
    """Random strings over `vocab_size` symbols ("0", "1", ...); subclasses define `target`."""

    def __init__(
        self,
        vocab_size: int = 10,
        min_len: int = 5,
        max_len: int = 10,
        test_min_len: int | None = None,
        test_max_len: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.set_lengths("len", (min_len, max_len), (test_min_len, test_max_len))
        check("vocab_size", vocab_size, vocab_size >= 2, ">= 2")
        self.vocab_size = vocab_size
        self.src_vocab = self.tgt_vocab = Vocab(str(i) for i in range(vocab_size))

    def longest(self, units: int) -> tuple[int, int]:
        return units, units  # every task here maps n symbols to n symbols

    def sample(self, n: int, min_len: int, max_len: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        lengths = torch.randint(min_len, max_len + 1, (n,), generator=generator)
        symbols = torch.randint(0, self.vocab_size, (n, max_len), generator=generator) + _FIRST_SYMBOL
        return symbols.masked_fill(~positions(max_len, lengths), PAD), lengths


@register_task("copy")
class CopyTask(SymbolSequenceTask):
    """y = x: the identity, the simplest test that information flows from encoder to decoder."""

    def target(self, src: Tensor, src_len: Tensor) -> tuple[Tensor, Tensor]:
        return src, src_len


@register_task("reverse")
class ReverseTask(SymbolSequenceTask):
    """y = x reversed: the first output needs the last input, far apart for a fixed context C."""

    def target(self, src: Tensor, src_len: Tensor) -> tuple[Tensor, Tensor]:
        return reverse_padded(src, src_len), src_len


@register_task("sort")
class SortTask(SymbolSequenceTask):
    """y = x sorted by symbol; each output attends to every input of its value."""

    def target(self, src: Tensor, src_len: Tensor) -> tuple[Tensor, Tensor]:
        last = torch.iinfo(src.dtype).max  # parks PAD at the end of the sort
        ordered = src.masked_fill(src == PAD, last).sort(dim=1).values
        return ordered.masked_fill(ordered == last, PAD), src_len


@register_task("addition")
class AdditionTask(SyntheticSeq2Seq):
    """Digits of two numbers -> digits of their sum, characters in and out: "123+45" -> "168".

    Operands have `min_digits`-`max_digits` digits (test: `test_min_digits`-`test_max_digits`),
    without leading zeros; the sum's carries make outputs depend on inputs far to the right.
    """

    def __init__(
        self,
        min_digits: int = 1,
        max_digits: int = 5,
        test_min_digits: int | None = None,
        test_max_digits: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.set_lengths("digits", (min_digits, max_digits), (test_min_digits, test_max_digits))
        for field, split in (("max_digits", "train"), ("test_max_digits", "test")):
            check(field, self.ranges[split][1], self.ranges[split][1] <= 18, "<= 18 (sums must fit in int64)")
        longest = max(self.test_slices, default=0) * max_digits
        check(
            "test_slices",
            list(self.test_slices),
            longest <= 18,
            f"multiples of at most 18 // max_digits = {18 // max_digits} "
            "(a slice's operands have up to k · max_digits digits, and sums must fit in int64)",
        )
        digits = [str(d) for d in range(10)]
        self.src_vocab = Vocab([*digits, "+"])
        self.tgt_vocab = Vocab(digits)
        self.plus = self.src_vocab.stoi["+"]

    def tokenize(self, text: str) -> list[str]:
        return list(text.replace(" ", ""))

    def longest(self, units: int) -> tuple[int, int]:
        return 2 * units + 1, units + 1  # a+b, and a sum of one digit more

    def detokenize(self, tokens: list[str]) -> str:
        return "".join(tokens)

    def sample(self, n: int, min_len: int, max_len: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        def operand() -> tuple[Tensor, Tensor]:
            count = torch.randint(min_len, max_len + 1, (n,), generator=generator)
            digits = torch.randint(0, 10, (n, max_len), generator=generator)
            leading = torch.randint(1, 10, (n,), generator=generator)
            digits[:, 0] = torch.where(count > 1, leading, digits[:, 0])  # no leading zeros
            return digits + _FIRST_SYMBOL, count

        (a, a_len), (b, b_len) = operand(), operand()
        plus = torch.full((n, 1), self.plus)
        # a, "+", b side by side, then real tokens packed left (a stable sort keeps their order)
        joined = torch.cat([a, plus, b], dim=1)
        real = torch.cat([positions(max_len, a_len), plus.bool(), positions(max_len, b_len)], dim=1)
        order = (~real).to(torch.uint8).sort(dim=1, stable=True).indices
        src_len = a_len + b_len + 1
        return joined.gather(1, order).masked_fill(~positions(joined.shape[1], src_len), PAD), src_len

    def target(self, src: Tensor, src_len: Tensor) -> tuple[Tensor, Tensor]:
        column = torch.arange(src.shape[1])
        plus_at = (src == self.plus).int().argmax(dim=1, keepdim=True)
        # a digit's place value is 10^(digits right of it in its own operand)
        operand_end = torch.where(column < plus_at, plus_at, src_len[:, None])
        place = (operand_end - 1 - column).clamp(min=0)
        is_digit = (src != PAD) & (src != self.plus)
        total = ((src - _FIRST_SYMBOL) * 10**place).masked_fill(~is_digit, 0).sum(dim=1)
        powers = 10 ** torch.arange(src.shape[1] // 2 + 1)  # the sum has at most max_digits + 1 digits
        length = (total[:, None] >= powers).sum(dim=1).clamp(min=1)
        least_first = total[:, None] // powers % 10 + _FIRST_SYMBOL
        return reverse_padded(least_first, length), length  # reverse_padded also blanks the tail
