"""Real sentence-level sentiment: the human-rated snippets of VADER (Hutto & Gilbert 2014).

Hutto, C.J. & Gilbert, E.E. (2014). VADER: A Parsimonious Rule-based Model for Sentiment Analysis
of Social Media Text. ICWSM-14. Each snippet's mean rating on -4..+4 comes from about 20 raters.
Four corpora, by `source`:

- `movies`: 10,605 Rotten Tomatoes review snippets, the sentences of Pang & Lee (2005), "Seeing
  stars: exploiting class relationships for sentiment categorization with respect to rating
  scales" (ACL), whose polarity labels the rating's sign matches on 97% of shared sentences;
- `amazon`: 3,708 product review sentences; `nyt`: 5,190 New York Times editorial sentences;
  `tweets`: 4,200 tweets.

They ship inside the MIT-licensed source archive of vaderSentiment 3.3.2
(`additional_resources/hutto_ICWSM_2014.tar.gz`), which `pip download` fetches into the data cache
on first use (see `attnx.tasks.cache`). Text is HTML-unescaped (tweets hold "&amp;") and split
by `word_tokenize`; the vocabulary keeps train words seen `min_freq` times. Splits are 80/10/10 by
a hash of the text (`attnx.tasks.splits`), the same for every seed, so a repeated snippet never
straddles train and test.
"""

from __future__ import annotations

import html
import tarfile
from typing import Any, ClassVar

from attnx.registry import register_task
from attnx.tasks.base import check
from attnx.tasks.cache import CachedTextTask, pip_sdist
from attnx.tasks.splits import capped, check_caps, hash_splits
from attnx.tasks.text import Example, word_tokenize

REQUIREMENT = "vaderSentiment==3.3.2"
ARCHIVE = "vaderSentiment-3.3.2.tar.gz"
INNER_ARCHIVE = "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz"
CORPORA = {
    "movies": "movieReviewSnippets_GroundTruth.txt",
    "amazon": "amazonReviewSnippets_GroundTruth.txt",
    "nyt": "nytEditorialSnippets_GroundTruth.txt",
    "tweets": "tweets_GroundTruth.txt",
}
VAL_FRACTION = TEST_FRACTION = 0.1


def ground_truth(sources: list[str]) -> dict[str, list[tuple[float, str]]]:
    """(mean rating, text) of every snippet of each corpus, in file order, duplicates removed."""
    out: dict[str, list[tuple[float, str]]] = {}
    with (
        tarfile.open(pip_sdist(REQUIREMENT, ARCHIVE)) as outer,
        tarfile.open(fileobj=outer.extractfile(INNER_ARCHIVE)) as inner,
    ):
        for source in sources:
            name = f"hutto_ICWSM_2014/{CORPORA[source]}"
            rows: dict[str, float] = {}
            member = inner.extractfile(name)
            if member is None:
                raise ValueError(f"{ARCHIVE}:{name}: not a file")
            for number, line in enumerate(member.read().decode("utf-8").splitlines(), 1):
                fields = line.split("\t", 2)  # snippet id, mean rating, text
                if len(fields) != 3:
                    raise ValueError(f"{ARCHIVE}:{name}:{number}: expected 3 tab-separated fields")
                rows.setdefault(html.unescape(fields[2]).strip(), float(fields[1]))
            out[source] = [(rating, text) for text, rating in rows.items()]
    return out


class VaderTask(CachedTextTask):
    """Shared by the VADER tasks: word tokens, train-only vocabulary, hash splits capped by size."""

    model_type = "classification"
    cache_ignores: ClassVar[tuple[str, ...]] = ("batch_size", "seed")  # hash splits ignore the seed
    classes_in_order: ClassVar[tuple[str, ...]]

    def __init__(
        self,
        min_freq: int = 2,
        train_size: int | None = None,
        val_size: int | None = None,
        test_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check("min_freq", min_freq, min_freq >= 1, ">= 1")
        check_caps(train_size=train_size, val_size=val_size, test_size=test_size)
        self.min_freq = min_freq
        self.train_size, self.val_size, self.test_size = train_size, val_size, test_size

    def labelled(self) -> list[Example]:
        """(text, class) for every usable snippet."""
        raise NotImplementedError

    def tokenize(self, text: str) -> list[str]:
        return word_tokenize(text)

    def build_classes(self, train_labels: list[str]) -> list[str]:
        return list(self.classes_in_order)  # fixed, so a small slice missing a class keeps the same ids

    def examples(self) -> dict[str, list[Example]]:
        splits = hash_splits(self.labelled(), lambda example: example[0], VAL_FRACTION, TEST_FRACTION)
        return capped(splits, {"train": self.train_size, "val": self.val_size, "test": self.test_size})


@register_task("sentiment_movies")
class SentimentMoviesTask(VaderTask):
    """Binary polarity of human-rated snippets: negative (mean rating < 0) or positive (> 0).

    `source` picks the corpus (movies, amazon, nyt, tweets); snippets rated exactly 0 are dropped.
    Sizes cap each split (null: all of it; movies has 8.4k/1.1k/1.1k).
    """

    classes_in_order = ("negative", "positive")

    def __init__(self, source: str = "movies", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check("source", source, source in CORPORA, " | ".join(CORPORA))
        self.source = source

    def labelled(self) -> list[Example]:
        return [
            (text, self.classes_in_order[rating > 0])
            for rating, text in ground_truth([self.source])[self.source]
            if rating != 0
        ]


@register_task("snippet_domain")
class SnippetDomainTask(VaderTask):
    """Which corpus a snippet comes from: movies, amazon, nyt or tweets (4 classes, imbalanced).

    Train is capped at 8k of its 18.8k snippets so the default run fits in a few CPU minutes;
    `task.train_size=null` takes all (val/test: 2.4k each).
    """

    classes_in_order = tuple(CORPORA)

    def __init__(self, train_size: int | None = 8000, **kwargs: Any) -> None:
        """VaderTask's arguments, with train capped at 8000 snippets by default (null: all)."""
        super().__init__(train_size=train_size, **kwargs)

    def labelled(self) -> list[Example]:
        corpora = ground_truth(list(CORPORA))
        return [(text, source) for source, rows in corpora.items() for _, text in rows]
