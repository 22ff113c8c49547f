"""The task contract: splits kept as padded tensors, vectorised batching, and the `Task` base class.

A Task is deliberately not a LightningDataModule: importing Lightning costs seconds and `attnx
plugins` must stay light; the training code wraps any Task in one generic DataModule.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Sampler

from attnx.tasks.shape import Shape
from attnx.vocab import Vocab

SPLITS = ("train", "val", "test")


def slice_name(multiple: int) -> str:
    """The split of test sequences up to `multiple` times the longest training length: `test@2x`."""
    return f"test@{multiple}x"


def slice_names(task_section: Any) -> list[str]:
    """The test slices a task config section (a mapping, a model spec's `task`) asks for, ascending."""
    return [slice_name(k) for k in sorted(task_section.get("test_slices") or ())]


class Batch(NamedTuple):
    """A batch, batch-first, PAD-padded to its own longest sequence."""

    src: Tensor  # [B, T] long
    src_len: Tensor  # [B] long: non-PAD source tokens
    tgt: Tensor | None = None  # [B, U] long: BOS y1..yn EOS PAD..; trains on tgt[:, :-1] -> tgt[:, 1:]
    label: Tensor | None = None  # [B] long class index; classification only
    # [B] long: the examples' positions in their split (for raw references); shadows tuple.index
    index: Tensor | None = None  # type: ignore[assignment]


@dataclass
class PaddedSplit(Dataset):
    """One split as padded tensors. Indexing with a tensor of example indices gives a trimmed `Batch`."""

    src: Tensor  # [N, T]
    src_len: Tensor  # [N]
    tgt: Tensor | None = None  # [N, U] with BOS and EOS
    tgt_len: Tensor | None = None  # [N], counting BOS and EOS
    label: Tensor | None = None  # [N]

    def __len__(self) -> int:
        return self.src.shape[0]

    def length_key(self) -> Tensor:
        """[N] what bucketing sorts by: target length (the decoder's steps), then source length."""
        if self.tgt_len is None:
            return self.src_len
        return self.tgt_len * (int(self.src_len.max()) + 1) + self.src_len

    def __getitem__(self, index: Tensor) -> Batch:
        src_len = self.src_len[index]
        src = self.src[index, : int(src_len.max())]
        tgt = (
            None
            if self.tgt is None or self.tgt_len is None
            else self.tgt[index, : int(self.tgt_len[index].max())]
        )
        label = None if self.label is None else self.label[index]
        return Batch(src, src_len, tgt, label, index)


class IndexBatchSampler(Sampler[Tensor]):
    """Yields tensors of example indices, one per batch (the DataLoader's collation is then a slice).

    Without `lengths`, batches are uniformly random (shuffle) or in split order. With `lengths`,
    batches hold examples of similar length, so less of each batch is padding (the bucketing of
    Joey NMT and torchtext's BucketIterator): training shuffles the examples, sorts each pool of
    `POOL_BATCHES` batches by length, cuts it into batches and shuffles the batches; evaluation
    sorts the whole split. A shuffled order depends only on (seed, epoch). Lightning calls
    `set_epoch` before each epoch; used bare, each pass advances it. The position within a pass is
    state (`state_dict`: the epoch and the batches yielded so far) that a checkpoint keeps, so a run
    resumed mid-epoch goes on with the batches an uninterrupted one would have had.

    Under DDP (`num_replicas` processes, this one `rank`) every process builds the same global
    batches and keeps its share of each, examples `rank`, `rank + num_replicas`, ... of the batch: a
    `DistributedSampler`'s promise (each example once per epoch, on one process; none repeated, none
    dropped) with the batches of a single process, so N processes take the optimiser steps one process
    would with `batch_size`. Every rank gets as many batches as the others, which DDP's collectives
    need: a last batch with fewer examples than processes joins the batch before it.
    """

    POOL_BATCHES = 100  # a pool sorts this many batches' examples: larger = less padding, less mixing

    def __init__(
        self,
        size: int,
        batch_size: int,
        shuffle: bool,
        seed: int,
        lengths: Tensor | None = None,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not one of {num_replicas} processes")
        if size < num_replicas:
            raise ValueError(f"a split of {size} examples cannot be shared by {num_replicas} processes")
        self.size, self.batch_size, self.shuffle, self.seed = size, batch_size, shuffle, seed
        self.lengths = lengths
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch = 0
        self._position: tuple[int, int] | None = None  # (epoch, batches yielded) of the pass under way
        self._resume_at = 0  # batches the next pass skips: the position a checkpoint restored

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:  # another epoch than the restored one starts at its beginning
            self._resume_at = 0
        self.epoch = epoch

    def state_dict(self) -> dict[str, int]:
        """Where the pass under way is: its epoch and how many batches it has yielded (the same on
        every DDP rank). A finished pass is the next one's start."""
        epoch, done = self._position or (self.epoch, 0)
        return {"epoch": epoch + 1, "batches": 0} if done >= len(self) else {"epoch": epoch, "batches": done}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """The next pass is epoch `state["epoch"]`'s, from its batch `state["batches"]` on."""
        self.epoch, self._resume_at, self._position = state["epoch"], state["batches"], None

    def __len__(self) -> int:
        short = self.size % self.batch_size
        return math.ceil(self.size / self.batch_size) - (0 < short < self.num_replicas)

    def __iter__(self) -> Iterator[Tensor]:
        epoch, start = self.epoch, self._resume_at
        self._resume_at = 0
        for done, batch in enumerate(self._global_batches()[start:], start + 1):
            self._position = (epoch, done)  # before the yield: the consumer has the batch from here on
            yield batch[self.rank :: self.num_replicas]

    def _global_batches(self) -> list[Tensor]:
        if not self.shuffle:
            order = torch.arange(self.size) if self.lengths is None else self.lengths.argsort(stable=True)
            return self._whole(list(order.split(self.batch_size)))
        generator = torch.Generator().manual_seed(derive_seed(self.seed, "shuffle", self.epoch))
        self.epoch += 1
        order = torch.randperm(self.size, generator=generator)
        if self.lengths is None:
            return self._whole(list(order.split(self.batch_size)))
        batches = []
        for pool in order.split(self.batch_size * self.POOL_BATCHES):
            batches += pool[self.lengths[pool].argsort(stable=True)].split(self.batch_size)
        batches = self._whole(batches)
        return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]

    def _whole(self, batches: list[Tensor]) -> list[Tensor]:
        """`batches` with a last one too small to give every process an example merged into the one
        before (only the last batch of a split, or of its last pool, can be short)."""
        if len(batches[-1]) < self.num_replicas:
            batches[-2:] = [torch.cat(batches[-2:])]
        return batches


class ResumableLoader(DataLoader):
    """A DataLoader of `IndexBatchSampler` batches whose position is part of a checkpoint: Lightning
    saves the `state_dict` of a training loader that has one (its `_Stateful` protocol), and the
    resumed run loads it back before the epoch goes on (`attnx.lit.resume.ExactResume`)."""

    sampler: IndexBatchSampler

    def state_dict(self) -> dict[str, int]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.sampler.load_state_dict(state)


def padding_fraction(split: PaddedSplit, batches: Iterable[Tensor]) -> dict[str, float]:
    """The share of padding in the batches' `src` and `tgt` tensors (each batch padded to its longest)."""
    padded = {"src": 0, "tgt": 0}
    real = {"src": 0, "tgt": 0}
    for index in batches:
        for name, lengths in (("src", split.src_len), ("tgt", split.tgt_len)):
            if lengths is not None:
                batch = lengths[index]
                padded[name] += len(batch) * int(batch.max())
                real[name] += int(batch.sum())
    return {name: 1 - real[name] / padded[name] for name in padded if padded[name]}


def derive_seed(seed: int, stream: str, index: int = 0) -> int:
    """An independent, process-stable seed per (seed, stream, index) (`hash()` of a str is salted)."""
    return zlib.crc32(f"{seed}/{stream}/{index}".encode())


def _as_is(batch: Any) -> Any:  # the loader's collate_fn: a sampled index gives a whole Batch
    return batch


def check(field: str, value: Any, ok: bool, allowed: str) -> None:
    """Raise the one-line error the CLI shows for a bad `task.<field>` value."""
    if not ok:
        raise ValueError(f"task.{field}={value!r} is invalid: must be {allowed}")


def check_sizes(**sizes: int) -> None:
    for field, value in sizes.items():
        check(field, value, value >= 1, ">= 1")


def check_slices(slices: Iterable[int]) -> tuple[int, ...]:
    """`task.test_slices`: distinct integer multiples >= 2 of the longest training length, ascending."""
    found = list(slices)
    ints = all(isinstance(k, int) and not isinstance(k, bool) for k in found)
    ok = ints and all(k >= 2 for k in found) and len(set(found)) == len(found)
    check("test_slices", found, ok, "distinct integers >= 2 (multiples of the longest training length)")
    return tuple(sorted(found))


def check_lengths(min_field: str, min_value: int, max_field: str, max_value: int) -> None:
    """A length range: min >= 1 and max >= min."""
    check(min_field, min_value, min_value >= 1, ">= 1")
    check(max_field, max_value, max_value >= min_value, f">= {min_field} ({min_value})")


class Task:
    """Base class of the `task` kind: a dataset with vocabularies and deterministic splits.

    Subclasses set `model_type` and implement `build()`; text-backed tasks subclass `TextTask` and
    implement only `examples()`. After `setup()`: `src_vocab`, and `tgt_vocab` (seq2seq) or
    `classes` (classification). An `lm` task's splits hold `tgt` aligned with `src`: the token each
    position must predict next, PAD where it has no target; it also gives `query_mask(src)`.
    Constructor arguments become the task's Hydra config, so keep them simple (int/float/bool/str/None)
    with defaults, and validate them in `__init__` with `check`. A subclass lists only the arguments it
    adds (or whose default it changes) and passes the rest on with `**kwargs`: its config has them all.
    """

    model_type: ClassVar[str]  # which model the task trains: a registered model type (attnx.registry)
    # the `attention` a run of this task takes when the user names none (None: conf/train.yaml's)
    default_attention: ClassVar[str | None] = None
    src_vocab: Vocab
    tgt_vocab: Vocab
    classes: list[str]
    # the multiples k of the longest training length whose split `test@{k}x` tests beyond it; a task that
    # supports slices takes `test_slices` and sets this (with `check_slices`)
    test_slices: tuple[int, ...] = ()

    def __init__(self, batch_size: int = 64, seed: int = 0) -> None:
        check("batch_size", batch_size, batch_size >= 1, ">= 1")
        check("seed", seed, 0 <= seed < 2**32, "in [0, 2**32)")
        self.batch_size = batch_size
        self.seed = seed
        self.splits: dict[str, PaddedSplit] = {}

    def build(self) -> dict[str, PaddedSplit]:
        """Generate or load the data, set the vocabularies (or classes) and return every split of
        `split_names()`."""
        raise NotImplementedError

    def split_names(self) -> list[str]:
        """train, val, test, then the test slices (`test@2x`, ...): the test stage's loaders in order."""
        return [*SPLITS, *map(slice_name, self.test_slices)]

    def setup(self) -> None:
        """Build the data once; later calls are free."""
        if not self.splits:
            self.splits = self.build()

    def declared_shape(self) -> Shape | None:
        """Each split's longest sequence as the task's arguments bound it, known without building the data;
        None (the default) when only the data can tell (text). The built data never exceeds it."""
        return None

    def shape(self) -> Shape:
        """The declared shape, else the built data's."""
        declared = self.declared_shape()
        if declared is not None:
            return declared
        self.setup()
        return Shape.of(self.splits)

    def generator(self, stream: str) -> torch.Generator:
        """A torch generator for one named random stream of this task's seed (e.g. one per split)."""
        return torch.Generator().manual_seed(derive_seed(self.seed, stream))

    def dataloader(
        self,
        split: str,
        shuffle: bool = False,
        batch_size: int | None = None,
        bucketing: bool = False,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> DataLoader:
        """Batches of one split, of similar lengths with `bucketing` (`IndexBatchSampler`); under DDP
        this process's share of each (`num_replicas` processes, this one `rank`). No workers:
        slicing in-memory tensors beats inter-process copies. Pinned on a CUDA machine, so the
        host-to-GPU copy can overlap compute (non_blocking)."""
        if split not in self.split_names():
            raise ValueError(f"unknown split {split!r}: expected one of {', '.join(self.split_names())}")
        self.setup()
        data = self.splits[split]
        lengths = data.length_key() if bucketing else None
        sampler = IndexBatchSampler(
            len(data), batch_size or self.batch_size, shuffle, self.seed, lengths, num_replicas, rank
        )
        pin = torch.cuda.is_available()
        # its own generator: an iterator started from the global one would draw from it (a seed for
        # workers), at moments a resumed run does not repeat, and dropout would then differ
        generator = self.generator(f"{split} loader")
        return ResumableLoader(
            data, sampler=sampler, batch_size=None, collate_fn=_as_is, pin_memory=pin, generator=generator
        )

    def text_metrics(self) -> dict[str, Any]:
        """Metrics of decoded seq2seq text for val/test, by name (logged as `val/<name>`, `test/<name>`).

        Each is a torchmetrics `Metric` updated with `(hypotheses: list[str], references:
        list[list[str]])`, the signature of torchmetrics' BLEU and chrF: one detokenised output per
        example and every acceptable reference for it (see `references`). None by default.
        """
        return {}

    def references(self, split: str, index: Tensor) -> list[list[str]]:
        """The acceptable outputs of examples `index` of `split`, detokenised, for `text_metrics`.

        By default the one target of each example, read back from its ids; tasks with raw text
        override this so that references keep the words the vocabulary maps to UNK.
        """
        targets = self.splits[split].tgt
        assert targets is not None, "references are of seq2seq tasks, whose splits have targets"
        rows = targets[index, 1:].tolist()  # past BOS
        return [[self.detokenize(self.tgt_vocab.decode(row))] for row in rows]

    def tokenize(self, text: str) -> list[str]:
        """Source tokens of a raw input (used by `attnx predict`): whitespace-separated by default."""
        return text.split()

    def detokenize(self, tokens: list[str]) -> str:
        return " ".join(tokens)

    def encode_source(self, text: str) -> tuple[Tensor, Tensor]:
        """`src` [1, T] and `src_len` [1] for one raw input, as in a batch."""
        if not hasattr(self, "src_vocab"):  # predict may restore the vocabulary without building data
            self.setup()
        ids = self.src_vocab.encode(self.tokenize(text))
        if not ids:
            raise ValueError(f"input {text!r} has no tokens")
        return torch.tensor([ids]), torch.tensor([len(ids)])


class SizedTask(Task):
    """A task whose splits hold as many examples as asked: `train_size`, `val_size`, `test_size` (each
    >= 1), read back as `sizes`. A subclass with other default sizes declares those arguments again."""

    def __init__(
        self, train_size: int = 5000, val_size: int = 500, test_size: int = 500, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        check_sizes(train_size=train_size, val_size=val_size, test_size=test_size)
        self.train_size, self.val_size, self.test_size = train_size, val_size, test_size

    @property
    def sizes(self) -> dict[str, int]:
        """Examples per split: a test slice has as many as test."""
        return {
            "train": self.train_size,
            "val": self.val_size,
            **dict.fromkeys(self.split_names()[2:], self.test_size),
        }

    @staticmethod
    def size_key(split: str) -> str:
        """The argument that sizes `split` (a slice is sized by test_size), for error messages."""
        return f"{split}_size" if split in SPLITS else "test_size"
