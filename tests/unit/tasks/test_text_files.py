"""Your own files: text_classification (CSV/TSV/JSONL) and text_pairs (TSV), errors that name the
file and line, on_error=skip, and a few training steps through the real CLI."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from attnx.registry import registry
from attnx.tasks.base import SPLITS, Task

from helpers.text_files import REVIEWS, csv_lines, pairs_files, write


def classification(tmp_path: Path, suffix: str = ".csv", **kwargs) -> Task:
    """A text_classification task over train/val/test files written from REVIEWS in one format."""
    formats = {
        ".csv": lambda rows: csv_lines(rows),
        ".tsv": lambda rows: ["text\tlabel", *(f"{t}\t{y}" for t, y in rows)],
        ".jsonl": lambda rows: [json.dumps({"text": t, "label": y, "id": 1}) for t, y in rows],
    }
    files = {
        f"{split}_file": str(write(tmp_path / f"{split}{suffix}", formats[suffix](REVIEWS)))
        for split in SPLITS
    }
    task = registry("task").get("text_classification")(**{**files, **kwargs})
    task.setup()
    return task


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_text_classification_reads_each_format(tmp_path: Path, suffix: str) -> None:
    task = classification(tmp_path, suffix)
    assert task.classes == ["neg", "pos"]
    assert [len(task.splits[s]) for s in SPLITS] == [4, 4, 4]
    assert task.src_vocab.decode(task.splits["train"].src[3].tolist()) == ["awful", ",", "dull"]


def test_columns_are_configurable_and_unknown_ones_are_named(tmp_path: Path) -> None:
    write(tmp_path / "data.csv", ["review,stars", *(f'"{text}",{label}' for text, label in REVIEWS)])
    kwargs = {f"{s}_file": str(tmp_path / "data.csv") for s in SPLITS}
    task = registry("task").get("text_classification")(text_column="review", label_column="stars", **kwargs)
    task.setup()
    assert task.classes == ["neg", "pos"]
    with pytest.raises(
        ValueError, match=r"data\.csv: no column 'label' \(task\.label_column\); it has: review, stars"
    ):
        registry("task").get("text_classification")(text_column="review", **kwargs).setup()


def test_malformed_row_names_file_and_line(tmp_path: Path) -> None:
    lines = csv_lines(REVIEWS)
    lines.insert(3, "9,too,many,fields")  # line 4 of the file
    path = write(tmp_path / "train.csv", lines)
    with pytest.raises(ValueError, match=rf"{path}:4: expected 3 fields, found 4 \(task.on_error=skip"):
        classification_from(path, tmp_path)
    jsonl = write(tmp_path / "train.jsonl", ['{"text": "fine", "label": "pos"}', "", "{not json"])
    with pytest.raises(ValueError, match=rf"{jsonl}:3: invalid JSON"):
        classification_from(jsonl, tmp_path)


def classification_from(train: Path, tmp_path: Path, **kwargs) -> Task:
    """text_classification with its own train file and well-formed val/test files."""
    good = write(tmp_path / "good.csv", csv_lines(REVIEWS))
    task = registry("task").get("text_classification")(
        train_file=str(train), val_file=str(good), test_file=str(good), **kwargs
    )
    task.setup()
    return task


def test_on_error_skip_counts_and_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lines = csv_lines(REVIEWS) + ["7,", '8,"",pos', "9,one,two,three"]  # short, empty text, long
    path = write(tmp_path / "train.csv", lines)
    with caplog.at_level(logging.WARNING, logger="attnx"):
        task = classification_from(path, tmp_path, on_error="skip")
    assert task.skipped == {str(path): 3}
    assert len(task.splits["train"]) == 4
    assert f"{path}: skipped 3 malformed rows (first, line 6: expected 3 fields, found 2)" in caplog.text


def test_missing_file_empty_split_and_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"task.train_file='nope.csv': no such file"):
        registry("task").get("text_classification")(train_file="nope.csv").setup()
    header_only = write(tmp_path / "val.csv", ["id,text,label"])
    good = write(tmp_path / "good.csv", csv_lines(REVIEWS))
    task = registry("task").get("text_classification")(
        train_file=str(good), val_file=str(header_only), test_file=str(good)
    )
    with pytest.raises(ValueError, match=rf"{header_only}: no usable rows, so the val split would be empty"):
        task.setup()
    with pytest.raises(ValueError, match=r"task.train_file=None is invalid"):
        registry("task").get("text_classification")()
    with pytest.raises(
        ValueError, match=r"task.test_file=None is invalid: must be set together with val_file"
    ):
        registry("task").get("text_classification")(train_file="a.csv", val_file="b.csv")
    with pytest.raises(ValueError, match=r"task.on_error='ignore' is invalid: must be raise \| skip"):
        registry("task").get("text_pairs")(train_file="a.tsv", on_error="ignore")
    with pytest.raises(ValueError, match=r"unknown format '.txt'"):
        classification_from(write(tmp_path / "train.txt", ["x"]), tmp_path)


def test_val_and_test_are_carved_from_train_when_not_given(tmp_path: Path) -> None:
    rows = [(f"review number {i}", "pos" if i % 2 else "neg") for i in range(200)]
    path = write(tmp_path / "all.csv", csv_lines(rows))
    task = registry("task").get("text_classification")(
        train_file=str(path), val_fraction=0.2, test_fraction=0.1
    )
    task.setup()
    sizes = [len(task.splits[s]) for s in SPLITS]
    assert sum(sizes) == 200 and 100 < sizes[0] < 180 and 20 < sizes[1] < 60 and 5 < sizes[2] < 35
    with pytest.raises(
        ValueError, match=r"task.val_fraction=0.01 of the 3 rows .* leaves the val split empty"
    ):
        tiny = write(tmp_path / "tiny.csv", csv_lines(REVIEWS[:3]))
        registry("task").get("text_classification")(train_file=str(tiny), val_fraction=0.01).setup()


def test_text_pairs_tokenizers_and_malformed_lines(tmp_path: Path) -> None:
    files = pairs_files(tmp_path)
    task = registry("task").get("text_pairs")(**files, target_tokenizer="char")
    task.setup()
    assert task.detokenize(task.tokenize_target("dog cat")) == "dog cat"
    assert len(task.tgt_vocab) < 30  # characters, not words
    bad = write(tmp_path / "bad.tsv", ["a b\tb a", "no tab here", "x\t"])
    task = registry("task").get("text_pairs")(**{**files, "train_file": str(bad)})
    with pytest.raises(
        ValueError, match=rf"{bad}:2: expected 2 tab-separated fields \(source, target\), found 1"
    ):
        task.setup()
    task = registry("task").get("text_pairs")(**{**files, "train_file": str(bad)}, on_error="skip")
    task.setup()
    assert task.skipped == {str(bad): 2}
