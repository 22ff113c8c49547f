"""Real data on small slices: VADER snippets (movies, amazon, nyt, tweets, domain), CMUdict g2p,
Babel dates; the data cache; a few training steps of each through the CLI; beam search through a
trained checkpoint.

The vaderSentiment archive is fetched once per session with pip, as the task does: the tests that
need it are e2e (pip runs in a subprocess), skipped with pip's reason where the package index cannot
be reached.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnx.cli import main as cli
from attnx.predict import load
from attnx.registry import registry
from attnx.tasks.base import SPLITS
from attnx.tasks.cache import DataUnavailableError, pip_sdist
from attnx.tasks.vader import ARCHIVE, CORPORA, REQUIREMENT, ground_truth

from helpers.real_data import SLICE, make, texts
from helpers.tiny import NO_HEATMAPS, ONE_EPOCH, TINY_MODEL, TINY_RNN, TINY_TRANSFORMER, completed

BUDGET = [*ONE_EPOCH, *NO_HEATMAPS, *(f"task.{key}={value}" for key, value in SLICE.items())]


TINY_RUN = [*TINY_RNN, *TINY_MODEL, *BUDGET]


@pytest.fixture(scope="session")
def _vader_download(data_dir: Path) -> Path | DataUnavailableError:
    """One download attempt per session; a failure is remembered, not retried by every test."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATTNX_DATA", str(data_dir))
        try:
            return pip_sdist(REQUIREMENT, ARCHIVE)
        except DataUnavailableError as error:
            return error


@pytest.fixture
def vader(_vader_download: Path | DataUnavailableError) -> Path:
    if isinstance(_vader_download, DataUnavailableError):
        pytest.skip(f"the package index cannot be reached: {_vader_download}")
    return _vader_download


def test_movie_polarity_drops_neutral_snippets_and_follows_the_rating_sign(vader: Path) -> None:
    rows = ground_truth(["movies"])["movies"]
    assert 10_500 < len(rows) < 10_610  # 10,605 snippets less a few exact duplicates
    ratings = {text: rating for rating, text in rows}
    task = registry("task").get("sentiment_movies")()
    labelled = task.labelled()
    assert len(labelled) == sum(rating != 0 for rating, _ in rows)
    assert all((label == "positive") == (ratings[text] > 0) for text, label in labelled)
    assert ratings["Effective but too tepid biopic"] < 0  # a sentence of Pang & Lee's negative file


def test_movie_splits_are_fixed_disjoint_and_capped(vader: Path) -> None:
    a, b = make("sentiment_movies", seed=1), make("sentiment_movies", seed=2)
    assert [len(a.splits[s]) for s in SPLITS] == [200, 50, 50]
    for split in SPLITS:  # the hash split ignores the seed: seeds vary the model, not the data
        assert torch.equal(a.splits[split].src, b.splits[split].src)
    assert not texts(a, "train") & texts(a, "test")
    assert a.classes == ["negative", "positive"] and set(a.splits["train"].label.tolist()) == {0, 1}
    assert a.src_vocab.stoi["<unk>"] in a.splits["test"].src  # words unseen (twice) in train


@pytest.mark.parametrize("source", [s for s in CORPORA if s != "movies"])
def test_other_sources_are_binary_too(vader: Path, source: str) -> None:
    task = make("sentiment_movies", source=source, train_size=None)
    assert task.classes == ["negative", "positive"]
    assert 0.2 < float(task.splits["train"].label.float().mean()) < 0.8
    assert len(task.splits["train"]) > 2000


def test_domain_task_has_four_classes(vader: Path) -> None:
    task = make("snippet_domain", train_size=None)
    assert task.classes == ["movies", "amazon", "nyt", "tweets"]
    counts = torch.bincount(task.splits["train"].label, minlength=4).tolist()
    assert counts[0] > counts[2] > counts[3] > counts[1] > 2000  # movies 10.6k > nyt > tweets > amazon


@pytest.mark.parametrize(
    ("task", "metrics"),
    [
        ("sentiment_movies", ["test/acc", "test/f1"]),
        ("snippet_domain", ["test/acc"]),
        ("g2p", ["test/per", "test/wer", "test/exact_match", "val/wer"]),
    ],
)
def test_real_tasks_train_end_to_end(
    tmp_path: Path, request: pytest.FixtureRequest, task: str, metrics
) -> None:
    if task != "g2p":
        request.getfixturevalue("vader")
    record = completed(tmp_path, f"task={task}", *TINY_RUN)
    for name in metrics:  # insertions can take the phoneme error rate of an untrained model past 1
        assert 0.0 <= record["metrics"][name] <= (float("inf") if name.endswith("/per") else 1.0)


@pytest.mark.parametrize(
    "model", [TINY_RUN, [*TINY_RNN, *TINY_TRANSFORMER, "attention=dot", *BUDGET]], ids=["rnn", "transformer"]
)
def test_beam_search_through_a_trained_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture, model: list[str]
) -> None:
    """Dates trained by the CLI, validated and tested with beam search; then from its checkpoint:
    beam 1 is exactly greedy, and a beam of 4 never has lower model log-probability than greedy."""
    record = completed(tmp_path, "task=dates", "decode.beam_size=3", *model)
    assert 0.0 <= record["metrics"]["test/exact_match"] <= 1.0
    task = registry("task").get("dates")(**SLICE)
    batch = next(iter(task.dataloader("test")))
    greedy_module = load(record["checkpoint"], {"beam_size": 1})
    max_len = int(greedy_module.spec.decode["max_len_ratio"] * int(batch.src_len.max())) + 5
    greedy, _ = greedy_module.model.greedy(batch.src, batch.src_len, max_len)
    assert torch.equal(greedy_module.decode(batch.src, batch.src_len), greedy)

    beam_module = load(record["checkpoint"], {"beam_size": 4, "length_penalty": 0.0})
    beam = beam_module.decode(batch.src, batch.src_len)
    model = beam_module.model
    gain = model.sequence_logprob(batch.src, batch.src_len, beam) - model.sequence_logprob(
        batch.src, batch.src_len, greedy
    )
    assert (gain >= -1e-4).all()

    capsys.readouterr()
    ckpt = record["checkpoint"]
    assert cli(["predict", f"ckpt={ckpt}", "input=de 17. Mai 2023", "decode.max_len_ratio=0.5"]) == 0
    first_line = capsys.readouterr().out.splitlines()[0]
    assert len(first_line) <= int(0.5 * len(registry("task").get("dates")().tokenize("de 17. Mai 2023"))) + 5
