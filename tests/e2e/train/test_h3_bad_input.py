"""Bad difficulty keys of H3's synthetic tasks through the real `attnx train`: one stderr line naming
the key and its limit, exit code 2, before any sequence is drawn (`ICLSynthetic.sample` is replaced by
one that fails the test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnx.tasks.induction import ICLSynthetic

from helpers.tiny import NO_HEATMAPS, train


def _no_data(*args: object, **kwargs: object) -> None:
    raise AssertionError("a sequence was drawn before the bad key was refused")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("task=induction_head task.vocab_size=3", "task.vocab_size=3 is invalid: must be >= 4"),
        ("task=induction_head task.seq_len=2", "task.seq_len=2 is invalid: must be >= 3"),
        ("task=associative_recall task.seq_len=41", "task.seq_len=41 is invalid: must be an even number"),
        ("task=associative_recall task.test_seq_len=0", "task.test_seq_len=0 is invalid"),
        ("task=associative_recall task.vocab_size=two", "task.vocab_size=two"),  # OmegaConf's type check
    ],
)
def test_a_bad_key_is_one_line_and_exit_2_before_any_data(
    line: str, expected: str, tmp_path: Path, capfd: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ICLSynthetic, "sample", _no_data)
    capfd.readouterr()
    assert train(tmp_path, *line.split(), *NO_HEATMAPS) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (  # 2 tokens and a prompt of 4 make 16 sequences, all of them among 200 training ones
            "task=induction_head task.vocab_size=4 task.seq_len=4",
            "task.val_size=500 is invalid: only 0 sequences unseen in earlier splits",
        ),
        (
            "task=associative_recall lm.max_len=32",
            "lm.max_len=32: the train split of task=associative_recall needs 42 tokens",
        ),
    ],
)
def test_data_that_cannot_be_made_or_does_not_fit_is_one_line_and_exit_2(
    line: str, expected: str, tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    capfd.readouterr()
    assert train(tmp_path, *line.split(), "task.train_size=200", *NO_HEATMAPS) == 2
    err = capfd.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err
