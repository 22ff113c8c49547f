"""Tasks whose data are text examples: generated sentences, expressions, or a user's own files.

A subclass implements one hook, `examples()`, returning (source text, target text or class name)
pairs per split; `TextTask` tokenises them, builds vocabularies on train only, and packs the
splits into padded tensors.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from attnx.registry import model_type
from attnx.tasks.base import SPLITS, PaddedSplit, Task, derive_seed
from attnx.vocab import BOS, EOS, PAD, Vocab

Example = tuple[str, str]  # (source text, target text) or (source text, class name)

_WORD = re.compile(r"\w+|[^\w\s]")


def word_tokenize(text: str) -> list[str]:
    """Lower-cased words and single punctuation marks: "Not bad, really!" -> not bad , really !"""
    return _WORD.findall(text.lower())


def vocab_from(token_lists: Iterable[list[str]], min_freq: int = 1) -> Vocab:
    """Tokens seen at least `min_freq` times, most frequent first (ties alphabetical, for determinism)."""
    counts = Counter(t for tokens in token_lists for t in tokens)
    kept = sorted((t for t, c in counts.items() if c >= min_freq), key=lambda t: (-counts[t], t))
    return Vocab(kept)


def pad_ids(sequences: list[list[int]]) -> tuple[Tensor, Tensor]:
    """Id lists -> (PAD-padded [N, T] long, lengths [N]) with one scatter instead of N small tensors."""
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)
    width = int(lengths.max()) if len(sequences) else 0
    padded = torch.full((len(sequences), width), PAD, dtype=torch.long)
    padded[torch.arange(width) < lengths[:, None]] = torch.tensor(
        [i for s in sequences for i in s], dtype=torch.long
    )
    return padded, lengths


def unique_examples(
    sample: Callable[[random.Random], Example | None], sizes: dict[str, int], seed: int
) -> dict[str, list[Example]]:
    """Draw `sizes[split]` examples per split from `sample` (None = rejected draw), no source twice.

    Each split has its own random stream, so a split's examples do not shift when another split's
    size changes (except for the rare draw rejected as a duplicate of an earlier split).
    """
    seen: set[str] = set()
    out: dict[str, list[Example]] = {}
    for split, size in sizes.items():
        rng = random.Random(derive_seed(seed, split))
        examples: list[Example] = []
        for _ in range(100 * size + 1000):
            example = sample(rng)
            if example is not None and example[0] not in seen:
                seen.add(example[0])
                examples.append(example)
                if len(examples) == size:
                    break
        else:
            raise ValueError(
                f"task.{split}_size={size} is invalid: only {len(examples)} distinct examples were found; "
                "lower the size or widen the lengths"
            )
        out[split] = examples
    return out


class TextTask(Task):
    """A task built from text examples; subclasses implement `examples()` and set `model_type` (one whose
    targets are token sequences, as seq2seq's, or labels, as classification's).

    Override `tokenize` (and `tokenize_target` for seq2seq targets), `build_vocab` for a closed
    vocabulary, or `build_classes` for a fixed class order. `min_freq` sets the vocabulary cut-off.
    """

    min_freq: int = 1

    @property
    def sequence_targets(self) -> bool:
        """Whether the targets are token sequences (the model type's `targets`), else class labels; a text
        task cannot give a model type other targets (an lm's aligned next tokens)."""
        targets = model_type(self.model_type).targets
        if targets not in ("sequence", "label"):
            raise ValueError(
                f"task {type(self).__name__}: a TextTask's examples give sequence or label targets; model "
                f"type {self.model_type} trains on {targets} targets"
            )
        return targets == "sequence"

    def examples(self) -> dict[str, list[Example]]:
        """Raw (source, target-or-class) pairs for each of train, val and test."""
        raise NotImplementedError

    def tokenize_target(self, text: str) -> list[str]:
        return self.tokenize(text)

    def build_vocab(self, train_tokens: list[list[str]]) -> Vocab:
        """A vocabulary from the train split only, so val/test words the model never saw become UNK."""
        return vocab_from(train_tokens, self.min_freq)

    def build_classes(self, train_labels: list[str]) -> list[str]:
        return sorted(set(train_labels))

    def build(self) -> dict[str, PaddedSplit]:
        raw = self.examples()
        for split in SPLITS:
            if not raw.get(split):
                raise ValueError(f"task {type(self).__name__}: the {split} split is empty")
        sources = {split: [self.tokenize(x) for x, _ in raw[split]] for split in SPLITS}
        for split, token_lists in sources.items():
            empty = next((i for i, tokens in enumerate(token_lists) if not tokens), None)
            if empty is not None:
                raise ValueError(f"{split} example {empty} has an empty source: {raw[split][empty][0]!r}")
        self.src_vocab = self.build_vocab(sources["train"])
        if self.sequence_targets:
            self.tgt_vocab = self.build_vocab([self.tokenize_target(y) for _, y in raw["train"]])
            self.reference_texts = {
                split: [self.example_references(x, y) for x, y in raw[split]] for split in ("val", "test")
            }
        else:
            self.classes = self.build_classes([y for _, y in raw["train"]])
        return {split: self._pack(split, sources[split], [y for _, y in raw[split]]) for split in SPLITS}

    def example_references(self, source: str, target: str) -> list[str]:
        """Every acceptable output for one raw example, normalised as decoded outputs are (tokenised,
        then detokenised) but without the vocabulary's UNK. One by default; g2p lists each pronunciation."""
        return [self.detokenize(self.tokenize_target(target))]

    def references(self, split: str, index: Tensor) -> list[list[str]]:
        return [self.reference_texts[split][i] for i in index.tolist()]

    def _pack(self, split: str, sources: list[list[str]], targets: list[str]) -> PaddedSplit:
        src, src_len = pad_ids([self.src_vocab.encode(tokens) for tokens in sources])
        if self.sequence_targets:
            tgt, tgt_len = pad_ids(
                [[BOS, *self.tgt_vocab.encode(self.tokenize_target(y)), EOS] for y in targets]
            )
            return PaddedSplit(src, src_len, tgt, tgt_len)
        index = {c: i for i, c in enumerate(self.classes)}
        unknown = sorted(set(targets) - index.keys())
        if unknown:
            raise ValueError(f"{split} split has labels not in train: {', '.join(unknown)}")
        return PaddedSplit(src, src_len, label=torch.tensor([index[y] for y in targets], dtype=torch.long))
