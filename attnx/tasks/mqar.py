"""Multi-query associative recall (MQAR; Arora et al. 2024, "Zoology"), a language-model task.

A sequence of `seq_len` tokens starts with `num_kv_pairs` key-value pairs k₁ v₁ k₂ v₂ …, keys drawn
without repetition from the lower half of the vocabulary and values from the upper half. Every key is then
queried once, at even offsets 2g of the rest of the sequence, the gap g drawn without replacement with
probability ∝ α·g^(α−1) over g = 1..(seq_len − 2·pairs)/2 (α = `alpha`; small α spreads the queries
over short and long distances). The target at a query is the value paired with its key, the token a
model should predict next; no other position has a target. Every other position is filler: a uniform
random token (Zoology's `random_non_queries`). A harder test split takes `test_seq_len` and
`test_num_kv_pairs` (`val_like_test` draws val like it). Each k of `test_slices` adds a split `test@{k}x`
of k · seq_len tokens and k · num_kv_pairs pairs (Zoology's harder settings: longer sequences, more pairs to
recall), a metric of its own beside the in-distribution `test`. Splits come from the seed alone and never
share a sequence.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from attnx.registry import register_task
from attnx.tasks.base import check, check_slices, slice_name
from attnx.tasks.drawn import DrawnTask
from attnx.tasks.shape import Shape
from attnx.vocab import PAD, SPECIALS, Vocab

_FIRST_SYMBOL = len(SPECIALS)  # token t has id _FIRST_SYMBOL + t


@register_task("mqar")
class MQARTask(DrawnTask):
    """Associative recall over `vocab_size` tokens "0".."V-1" (keys 1..V/2−1, values V/2..V−1), for the
    `lm` model kind. Metrics: accuracy at the query positions and exact match over all of a sequence's."""

    model_type = "lm"
    default_attention = "multi_head"  # softmax attention, the paper's reference that solves MQAR

    def __init__(
        self,
        vocab_size: int = 64,
        seq_len: int = 64,
        num_kv_pairs: int = 4,
        alpha: float = 0.01,
        test_seq_len: int | None = None,
        test_num_kv_pairs: int | None = None,
        val_like_test: bool = False,
        test_slices: tuple[int, ...] = (),
        train_size: int = 4000,  # SizedTask's and Task's arguments, with this task's own defaults
        test_size: int = 1000,
        batch_size: int = 32,
        **kwargs: Any,
    ) -> None:
        super().__init__(train_size=train_size, test_size=test_size, batch_size=batch_size, **kwargs)
        check("alpha", alpha, alpha > 0, "> 0")
        check("vocab_size", vocab_size, vocab_size >= 4, ">= 4 (keys and values need a half each)")
        test_seq_len = seq_len if test_seq_len is None else test_seq_len
        test_num_kv_pairs = num_kv_pairs if test_num_kv_pairs is None else test_num_kv_pairs
        for prefix, length, pairs in (
            ("", seq_len, num_kv_pairs),
            ("test_", test_seq_len, test_num_kv_pairs),
        ):
            check(f"{prefix}num_kv_pairs", pairs, pairs >= 1, ">= 1")
            check(
                f"{prefix}num_kv_pairs",
                pairs,
                4 * pairs <= length,
                f"<= {prefix}seq_len / 4 = {length // 4} (the pairs and one query per key with a gap "
                "after it must fit)",
            )
            check(
                f"{prefix}num_kv_pairs",
                pairs,
                pairs <= vocab_size // 2 - 1,
                f"<= vocab_size / 2 - 1 = {vocab_size // 2 - 1} (distinct keys from the lower half of "
                f"vocab_size={vocab_size})",
            )
        self.test_slices = check_slices(test_slices)
        most = (vocab_size // 2 - 1) // num_kv_pairs  # k · num_kv_pairs distinct keys from the lower half
        check(
            "test_slices",
            list(self.test_slices),
            max(self.test_slices, default=0) <= most,
            f"multiples of at most {most} (a slice's k · {num_kv_pairs} keys are distinct tokens of the "
            f"lower half of vocab_size={vocab_size})",
        )
        self.vocab_size, self.alpha = vocab_size, alpha
        self.shapes = {"train": (seq_len, num_kv_pairs), "test": (test_seq_len, test_num_kv_pairs)}
        self.shapes["val"] = self.shapes["test" if val_like_test else "train"]
        self.shapes |= {slice_name(k): (k * seq_len, k * num_kv_pairs) for k in self.test_slices}
        self.src_vocab = Vocab(str(t) for t in range(vocab_size))

    def declared_shape(self) -> Shape:
        lengths = {split: self.shapes[split][0] for split in self.split_names()}
        return Shape(lengths, lengths)  # every sequence is its split's seq_len long, its targets aligned

    def sample(self, n: int, split: str, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """`n` sequences of the split's shape: (token ids [n, seq_len], target ids [n, seq_len], PAD where
        there is no target)."""
        seq_len, pairs = self.shapes[split]
        half = self.vocab_size // 2
        keys = 1 + torch.rand(n, half - 1, generator=generator).argsort(1)[:, :pairs]
        values = half + torch.rand(n, self.vocab_size - half, generator=generator).argsort(1)[:, :pairs]
        space = (seq_len - 2 * pairs) // 2
        gap = torch.arange(1, space + 1, dtype=torch.float64)
        weights = (self.alpha * gap ** (self.alpha - 1)).expand(n, space)
        gaps = torch.multinomial(weights, pairs, replacement=False, generator=generator)  # 0-based slots
        tokens = torch.randint(0, self.vocab_size, (n, seq_len), generator=generator)
        tokens[:, 0 : 2 * pairs : 2], tokens[:, 1 : 2 * pairs : 2] = keys, values
        at = 2 * pairs + 2 * gaps  # each key's query position
        tokens.scatter_(1, at, keys)
        targets = torch.full((n, seq_len), PAD, dtype=torch.long)
        targets.scatter_(1, at, values + _FIRST_SYMBOL)
        return tokens + _FIRST_SYMBOL, targets

    def query_mask(self, src: Tensor) -> Tensor:
        """[B, T] bool: the query positions of raw sequences (`attnx predict`): after the pairs, a token
        that is one of the sequence's keys. Filler that happens to repeat a key counts as a query too."""
        # a split's pairs by its length; where lengths coincide the later wins: test's over a slice's
        # over train's (a test_seq_len may equal seq_len with other pairs)
        by_length = dict(self.shapes[split] for split in ("train", *self.split_names()[3:], "test"))
        pairs = by_length.get(src.shape[1], self.shapes["train"][1])
        keys = src[:, 0 : 2 * pairs : 2]
        after = torch.arange(src.shape[1]) >= 2 * pairs
        return after & (src[:, :, None] == keys[:, None, :]).any(-1)
