"""Real data on small slices: VADER snippets (movies, amazon, nyt, tweets, domain), CMUdict g2p,
Babel dates; the data cache; a few training steps of each through the CLI; beam search through a
trained checkpoint.

The vaderSentiment archive is fetched once per session with pip, as the task does: the tests that
need it are e2e (pip runs in a subprocess), skipped with pip's reason where the package index cannot
be reached.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import torch
from babel.dates import format_date

from attnx.registry import registry
from attnx.tasks.base import SPLITS
from attnx.tasks.g2p import lexicon

from helpers.real_data import SLICE, make, texts


@pytest.fixture(autouse=True)
def _data_cache(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test reads and writes the session's data cache, never the user's."""
    monkeypatch.setenv("ATTNX_DATA", str(data_dir))


def test_second_build_comes_from_the_tensor_cache(data_dir: Path) -> None:
    first = make("dates", seed=7)
    path = first.cache_path()
    assert path.is_file() and path.parent == data_dir / "tasks"
    again = registry("task").get("dates")(**{**SLICE, "seed": 7, "batch_size": 4})
    assert again.cache_path() == path  # batch_size does not shape the data: same file
    again.examples = lambda: pytest.fail("built again instead of loaded from the cache")
    again.setup()
    for split in SPLITS:
        assert torch.equal(first.splits[split].src, again.splits[split].src)
        assert torch.equal(first.splits[split].tgt, again.splits[split].tgt)
    assert again.src_vocab.itos == first.src_vocab.itos and again.reference_texts == first.reference_texts
    assert make("dates", seed=8).cache_path() != path


@pytest.mark.slow  # CMUdict's 120,000 words, twice
def test_g2p_splits_by_word_and_accepts_every_pronunciation() -> None:
    task = make("g2p")
    words = {split: {"".join(w) for w in texts(task, split)} for split in SPLITS}
    assert not words["train"] & words["test"] and not words["val"] & words["test"]
    entries = lexicon(False)
    assert len(entries) > 120_000 and entries["read"] == ["R EH D", "R IY D"]
    assert len(task.splits["train"]) == sum(len(entries[w]) for w in words["train"])  # every pronunciation
    assert len(task.splits["test"]) == 50  # one example per word
    references = task.references("test", torch.arange(50))
    sources = ["".join(task.src_vocab.decode(row)) for row in task.splits["test"].src.tolist()]
    assert references == [entries[w] for w in sources]
    assert not any(p[-1].isdigit() for p in task.tgt_vocab.itos)  # stress removed: 39 phonemes + specials
    stressed = make("g2p", stress=True)
    assert any(p.endswith("1") for p in stressed.tgt_vocab.itos)


def test_dates_targets_are_the_iso_dates_of_their_sources() -> None:
    task = make("dates", locales=["en", "de", "zh"], formats=["short", "full"])
    for source, refs in zip(
        task.splits["test"].src.tolist(), task.references("test", torch.arange(len(task.splits["test"])))
    ):
        locale, *chars = task.src_vocab.decode(source)
        date = datetime.date.fromisoformat(refs[0])
        assert "".join(chars) in {format_date(date, f, locale=locale) for f in ("short", "full")}
        assert 1950 <= date.year <= 2049


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"locales": ["xx_YY"]}, r"task.locales='xx_YY' is invalid"),
        ({"formats": ["tiny"]}, r"task.formats=\('tiny',\) is invalid: must be a non-empty list of short"),
        ({"min_year": 1900, "max_year": 2049}, r"task.max_year=2049 is invalid: must be < min_year \+ 100"),
    ],
)
def test_dates_argument_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        registry("task").get("dates")(**kwargs)
