"""Your own data: `text_classification` (CSV, TSV or JSONL) and `text_pairs` (TSV source<TAB>target).

Give `task.train_file` and either both `task.val_file` and `task.test_file` or neither, in which
case val and test are carved from the train file by a hash of the source text (`val_fraction`,
`test_fraction`; `attnx.tasks.splits`). Files are UTF-8; relative paths are relative to the folder
`attnx train` runs in. A malformed row stops the run with an error naming its file and line;
`task.on_error=skip` drops such rows instead and logs how many. Files are read afresh on every run
(no cache), so an edited file is never served stale.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnx.registry import register_task
from attnx.tasks.base import SPLITS, check
from attnx.tasks.splits import check_fractions, hash_splits
from attnx.tasks.text import Example, TextTask, word_tokenize

log = logging.getLogger("attnx")

TOKENIZERS: dict[str, Callable[[str], list[str]]] = {
    "word": word_tokenize,  # lower-cased words and punctuation marks
    "whitespace": str.split,  # already tokenised text, case kept
    "char": list,  # every character, spaces included
}
TABLE_FORMATS = {".csv": ",", ".tsv": "\t", ".tab": "\t"}  # and .jsonl / .ndjson: one JSON object a line
JSON_LINES = (".jsonl", ".ndjson")


@dataclass(frozen=True)
class Malformed:
    """A row that cannot be used, and why."""

    reason: str


Row = tuple[int, Example | Malformed]  # (line number, the row's example or what is wrong with it)


class FileTask(TextTask):
    """Reads one file per split through `rows()`; subclasses parse their format there."""

    def __init__(
        self,
        train_file: str | None = None,
        val_file: str | None = None,
        test_file: str | None = None,
        tokenizer: str = "word",
        min_freq: int = 1,
        on_error: str = "raise",
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check("train_file", train_file, train_file is not None, "the path of a file")
        check("test_file", test_file, (val_file is None) == (test_file is None), "set together with val_file")
        check("tokenizer", tokenizer, tokenizer in TOKENIZERS, " | ".join(TOKENIZERS))
        check("min_freq", min_freq, min_freq >= 1, ">= 1")
        check("on_error", on_error, on_error in ("raise", "skip"), "raise | skip")
        if val_file is None:
            check_fractions(val_fraction, test_fraction)
        self.files = {"train": train_file, "val": val_file, "test": test_file}
        self.tokenizer, self.min_freq, self.on_error = tokenizer, min_freq, on_error
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.skipped: dict[str, int] = {}  # file -> malformed rows dropped by on_error=skip

    def rows(self, path: Path) -> Iterator[Row]:
        """Every non-blank row of one file."""
        raise NotImplementedError

    def tokenize(self, text: str) -> list[str]:
        return TOKENIZERS[self.tokenizer](text)

    def examples(self) -> dict[str, list[Example]]:
        if self.files["val"] is not None:
            return {split: self.load(split) for split in SPLITS}
        train = self.load("train")
        splits = hash_splits(train, lambda example: example[0], self.val_fraction, self.test_fraction)
        for split in ("val", "test"):
            if not splits[split]:
                raise ValueError(
                    f"task.{split}_fraction={getattr(self, f'{split}_fraction')} of the {len(train)} rows of "
                    f"{self.files['train']} leaves the {split} split empty: raise it, add rows, or give "
                    "task.val_file and task.test_file"
                )
        return splits

    def load(self, split: str) -> list[Example]:
        """The examples of one split's file; malformed rows raise or are counted and skipped."""
        file = self.files[split]
        path = None if file is None else Path(file).expanduser()
        if path is None or not path.is_file():
            raise ValueError(f"task.{split}_file={file!r}: no such file")
        examples: list[Example] = []
        bad: list[tuple[int, Malformed]] = []
        try:
            for line, row in self.rows(path):
                if isinstance(row, Malformed):
                    if self.on_error == "raise":
                        raise ValueError(f"{path}:{line}: {row.reason} (task.on_error=skip drops such rows)")
                    bad.append((line, row))
                else:
                    examples.append(row)
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}: not UTF-8 text ({error})") from error
        if bad:
            self.skipped[str(path)] = len(bad)
            line, first = bad[0]
            log.warning(
                "%s: skipped %d malformed rows (first, line %d: %s)", path, len(bad), line, first.reason
            )
        if not examples:
            raise ValueError(f"{path}: no usable rows, so the {split} split would be empty")
        return examples


@register_task("text_classification")
class TextClassificationTask(FileTask):
    """Classify texts from your files: CSV/TSV with a header row, or JSONL; columns by name.

    The format follows the extension (.csv, .tsv/.tab, .jsonl/.ndjson). A row is malformed when it
    has the wrong number of fields, an empty text or label, or (JSONL) is not a JSON object with
    both columns. Classes are the train split's labels, sorted.
    """

    model_type = "classification"

    def __init__(self, text_column: str = "text", label_column: str = "label", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.columns = {"text": text_column, "label": label_column}

    def rows(self, path: Path) -> Iterator[Row]:
        if path.suffix.lower() in JSON_LINES:
            return self._json_rows(path)
        if path.suffix.lower() in TABLE_FORMATS:
            return self._table_rows(path, TABLE_FORMATS[path.suffix.lower()])
        formats = ", ".join([*TABLE_FORMATS, *JSON_LINES])
        raise ValueError(f"{path}: unknown format {path.suffix!r}; name the file with one of {formats}")

    def _check_columns(self, path: Path, columns: list[str]) -> None:
        for role, name in self.columns.items():
            if name not in columns:
                raise ValueError(
                    f"{path}: no column {name!r} (task.{role}_column); it has: {', '.join(map(str, columns))}"
                )

    def _example(self, text: Any, label: Any) -> Example | Malformed:
        if not isinstance(text, str) or not text.strip():
            return Malformed(f"the {self.columns['text']!r} text is empty or not a string")
        if label is None or not str(label).strip():
            return Malformed(f"the {self.columns['label']!r} label is empty")
        return text, str(label).strip()

    def _table_rows(self, path: Path, delimiter: str) -> Iterator[Row]:
        # TSV fields cannot hold tabs or newlines, so quotes in TSV text are just characters.
        with path.open(encoding="utf-8-sig", newline="") as file:
            reader = csv.reader(
                file, delimiter=delimiter, quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
            )
            header = next(reader, None)
            if header is None:
                raise ValueError(f"{path}: empty file (expected a header row naming the columns)")
            self._check_columns(path, header)
            text_at, label_at = header.index(self.columns["text"]), header.index(self.columns["label"])
            for fields in reader:
                if not fields:
                    continue
                if len(fields) != len(header):
                    yield reader.line_num, Malformed(f"expected {len(header)} fields, found {len(fields)}")
                else:
                    yield reader.line_num, self._example(fields[text_at], fields[label_at])

    def _json_rows(self, path: Path) -> Iterator[Row]:
        checked = False
        with path.open(encoding="utf-8-sig") as file:
            for line, raw in enumerate(file, 1):
                if not raw.strip():
                    continue
                try:
                    record = json.loads(raw)
                except json.JSONDecodeError as error:
                    yield line, Malformed(f"invalid JSON ({error.msg})")
                    continue
                if not isinstance(record, dict):
                    yield line, Malformed("not a JSON object")
                    continue
                if not checked:  # the first object names the columns, as a CSV header would
                    self._check_columns(path, list(record))
                    checked = True
                yield line, self._example(record.get(self.columns["text"]), record.get(self.columns["label"]))


@register_task("text_pairs")
class TextPairsTask(FileTask):
    """Sequence-to-sequence from your files: one `source<TAB>target` pair a line, no header.

    `tokenizer` splits sources and `target_tokenizer` (default: the same) targets; outputs are
    joined back with spaces, or with nothing for `char`. Reports BLEU and chrF (sacreBLEU's
    definitions) beside exact match. A line without exactly one tab, or with an empty side, is
    malformed.
    """

    model_type = "seq2seq"

    def __init__(
        self, tokenizer: str = "whitespace", target_tokenizer: str | None = None, **kwargs: Any
    ) -> None:
        """FileTask's arguments, with whitespace-split text by default (already tokenised pairs)."""
        super().__init__(tokenizer=tokenizer, **kwargs)
        target_tokenizer = target_tokenizer or tokenizer
        check("target_tokenizer", target_tokenizer, target_tokenizer in TOKENIZERS, " | ".join(TOKENIZERS))
        self.target_tokenizer = target_tokenizer

    def tokenize_target(self, text: str) -> list[str]:
        return TOKENIZERS[self.target_tokenizer](text)

    def detokenize(self, tokens: list[str]) -> str:
        return ("" if self.target_tokenizer == "char" else " ").join(tokens)

    def text_metrics(self) -> dict[str, Any]:
        from attnx.tasks.metrics import bleu, chrf

        return {"bleu": bleu(), "chrf": chrf()}

    def rows(self, path: Path) -> Iterator[Row]:
        with path.open(encoding="utf-8-sig", newline="") as file:
            for line, raw in enumerate(file, 1):
                text = raw.rstrip("\r\n")
                if not text.strip():
                    continue
                fields = text.split("\t")
                if len(fields) != 2:
                    yield (
                        line,
                        Malformed(f"expected 2 tab-separated fields (source, target), found {len(fields)}"),
                    )
                elif not fields[0].strip() or not fields[1].strip():
                    yield line, Malformed("empty source or target")
                else:
                    yield line, (fields[0], fields[1])
