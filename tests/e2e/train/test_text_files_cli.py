"""Your own files: text_classification (CSV/TSV/JSONL) and text_pairs (TSV), errors that name the
file and line, on_error=skip, and a few training steps through the real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnx.tasks.base import SPLITS

from helpers.text_files import REVIEWS, csv_lines, pairs_files, write
from helpers.tiny import NO_HEATMAPS, ONE_EPOCH, TINY_MODEL, TINY_RNN, completed, train

TINY_RUN = [
    *TINY_RNN,
    *TINY_MODEL,
    *ONE_EPOCH,
    *NO_HEATMAPS,
    "task.batch_size=8",
]  # no task.*_size: every row of the files


def test_text_pairs_trains_and_reports_bleu_chrf(tmp_path: Path) -> None:
    files = [f"task.{key}={value}" for key, value in pairs_files(tmp_path).items()]
    record = completed(tmp_path / "run", "task=text_pairs", *files, *TINY_RUN)
    for key in ("test/bleu", "test/chrf", "test/exact_match", "val/bleu"):
        assert 0.0 <= record["metrics"][key] <= 1.0


def test_text_classification_trains_and_bad_files_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    files = [f"task.{s}_file={write(tmp_path / f'{s}.csv', csv_lines(REVIEWS * 4))}" for s in SPLITS]
    record = completed(tmp_path / "run", "task=text_classification", *files, *TINY_RUN)
    assert 0.0 <= record["metrics"]["test/acc"] <= 1.0
    assert train(tmp_path / "x", "task=text_classification", "task.train_file=missing.csv") == 2
    err = capsys.readouterr().err.strip()
    assert err == "attnx train: task.train_file='missing.csv': no such file"
