"""Tasks whose splits are drawn from a generator of their own (mqar, MAD's capability tasks, H3's synthetics):
each split from the task's seed and the split's name alone, none repeating a sequence of an earlier split."""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor

from attnx.tasks.base import PaddedSplit, SizedTask
from attnx.tasks.synthetic import draw_unseen


class DrawnTask(SizedTask):
    """Subclasses give `sample`; `padded` makes a split of what it drew (by default an `lm` split, whose
    targets are aligned with the tokens)."""

    def sample(self, n: int, split: str, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """`n` sequences of `split` from `generator`: (token ids [n, T], what goes with each row)."""
        raise NotImplementedError

    def padded(self, split: str, src: Tensor, drawn: Tensor) -> PaddedSplit:
        length = torch.full((len(src),), src.shape[1])
        return PaddedSplit(src, length, drawn, length)

    def build(self) -> dict[str, PaddedSplit]:
        splits: dict[str, PaddedSplit] = {}
        for split in self.split_names():  # a test slice (`test@2x`) too, for a task that sets test_slices
            size, generator = self.sizes[split], self.generator(split)
            earlier = [s.src for s in splits.values()]
            src, drawn = draw_unseen(partial(self.sample, size, split, generator), size, earlier)
            if len(src) < size:
                unseen = f"only {len(src)} sequences unseen in earlier splits ({split})"
                raise ValueError(f"task.{self.size_key(split)}={size} is invalid: {unseen}")
            splits[split] = self.padded(split, src, drawn)
        return splits
