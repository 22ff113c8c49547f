"""Compositional sentiment: "i really hate this movie" buried in neutral filler.

Each sentence has one opinion clause ("the plot was not bad at all", "i do not really like this
film") among neutral phrases ("last night", "with my sister", ...), so the label depends on a few
words of a long sentence. A negator ("not", "never", "hardly") flips the polarity of the next
sentiment word; intensifiers ("really", "very") do not change it. With `num_classes=3` a third of
the clauses carry no sentiment word (possibly negated: "the movie was not long") and are neutral.
This is the example a reader wants attention pooling to explain: most weight on "hate".
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from attnx.registry import register_task
from attnx.tasks.base import SizedTask, check, check_lengths
from attnx.tasks.text import Example, TextTask, unique_examples, word_tokenize

# fmt: off
_ADJECTIVES = {
    "positive": ("good", "great", "excellent", "wonderful", "brilliant", "superb", "enjoyable", "charming"),
    "negative": ("bad", "awful", "terrible", "boring", "dull", "horrible", "dreadful", "tedious", "mediocre"),
    "neutral": ("long", "short", "french", "old", "new", "animated", "silent", "foreign"),
}
_VERBS = {
    "positive": ("love", "like", "enjoy", "adore", "admire"),
    "negative": ("hate", "dislike", "despise", "loathe", "detest"),
    "neutral": ("remember", "watch", "know", "understand"),
}
_NOUNS = ("movie", "film", "plot", "acting", "ending", "script", "soundtrack", "cast", "dialogue", "story")
_ADJ_INTENSIFIERS = ("very", "really", "truly", "quite")
_VERB_INTENSIFIERS = ("really", "truly", "absolutely")
_VERB_NEGATIONS = ("do not", "never", "hardly", "did not")
_FILLER = tuple(phrase.split() for phrase in (
    "yesterday", "last night", "with my sister", "at the cinema", "on a rainy sunday", "after work",
    "to be honest", "as i expected", "in my opinion", "for the most part", "by the way", "if you ask me",
    "my friend said", "we bought popcorn", "the theater was full", "it runs two hours", "it came out in may",
    "the director also wrote it", "there is a long car chase", "the hero is a detective",
    "the story is set in paris", "in the second half", "during the holidays", "on the big screen",
    "with subtitles", "and then", "after the trailers", "on my laptop", "with the kids",
    "for a school project",
))
_SINGLE_FILLER = ("well", "also", "then", "today", "overall", "honestly", "anyway", "basically")
# fmt: on

POSITIVE = frozenset(_ADJECTIVES["positive"] + _VERBS["positive"])
NEGATIVE = frozenset(_ADJECTIVES["negative"] + _VERBS["negative"])
NEGATORS = frozenset(("not", "never", "hardly"))
CLASSES = ("negative", "positive", "neutral")
_LONGEST_CLAUSE = 8  # "the soundtrack was not really good at all" style clauses never exceed this


def polarity(words: Sequence[str]) -> str:
    """The labelling rule: the last sentiment word, flipped by a negator anywhere before it since the
    previous sentiment word; "neutral" without sentiment words."""
    label, negated = "neutral", False
    for word in words:
        if word in NEGATORS:
            negated = True
        elif word in POSITIVE or word in NEGATIVE:
            label = "positive" if (word in POSITIVE) != negated else "negative"
            negated = False
    return label


def _clause(rng: random.Random, tone: str) -> list[str]:
    """One opinion clause of a given tone, negated half the time; intensified a third of the time."""
    negate = rng.random() < 0.5
    if rng.random() < 0.5:  # "the plot was (not) (very) bad (at all)"
        words = ["the", rng.choice(_NOUNS), rng.choice(("is", "was"))]
        words += ["not"] if negate else []
        words += [rng.choice(_ADJ_INTENSIFIERS)] if rng.random() < 1 / 3 else []
        words += [rng.choice(_ADJECTIVES[tone])]
        words += ["at", "all"] if negate and rng.random() < 0.5 else []
    else:  # "i (do not) (really) hate this movie"
        words = ["i"]
        words += rng.choice(_VERB_NEGATIONS).split() if negate else []
        words += [rng.choice(_VERB_INTENSIFIERS)] if rng.random() < 1 / 3 else []
        words += [rng.choice(_VERBS[tone]), rng.choice(("this", "the")), rng.choice(_NOUNS)]
    return words


@register_task("sentiment")
class SentimentTask(TextTask, SizedTask):
    """Synthetic sentence polarity; lengths in words; labels negative/positive(/neutral)."""

    model_type = "classification"

    def __init__(
        self,
        min_len: int = 10,
        max_len: int = 30,
        num_classes: int = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_lengths("min_len", min_len, "max_len", max_len)
        check(
            "max_len",
            max_len,
            max_len >= _LONGEST_CLAUSE,
            f">= {_LONGEST_CLAUSE} (the longest opinion clause)",
        )
        check("num_classes", num_classes, num_classes in (2, 3), "2 (negative/positive) or 3 (with neutral)")
        self.min_len, self.max_len, self.num_classes = min_len, max_len, num_classes

    def tokenize(self, text: str) -> list[str]:
        return word_tokenize(text)

    def build_classes(self, train_labels: list[str]) -> list[str]:
        return list(CLASSES[: self.num_classes])

    def examples(self) -> dict[str, list[Example]]:
        return unique_examples(self.sentence, self.sizes, self.seed)

    def sentence(self, rng: random.Random) -> Example:
        """One sentence: an opinion clause at a random place among filler, `min_len`-`max_len` words."""
        clause = _clause(rng, rng.choice(CLASSES[: self.num_classes]))
        filler: list[list[str]] = []
        room = rng.randint(max(self.min_len, len(clause)), self.max_len) - len(clause)
        while room > 0:
            phrase = rng.choice(_FILLER)
            phrase = phrase if len(phrase) <= room else [rng.choice(_SINGLE_FILLER)]
            filler.append(phrase)
            room -= len(phrase)
        filler.insert(rng.randint(0, len(filler)), clause)
        words = [word for phrase in filler for word in phrase]
        return " ".join(words), polarity(words)
