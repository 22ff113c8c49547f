"""Small data files for the file-backed tasks' tests."""

from __future__ import annotations

from pathlib import Path

from attnx.tasks.base import SPLITS

REVIEWS = [("a great film", "pos"), ("truly awful", "neg"), ("great fun", "pos"), ("awful, dull", "neg")]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def csv_lines(rows: list[tuple[str, str]], header: str = "id,text,label") -> list[str]:
    return [header, *(f'{i},"{text}",{label}' for i, (text, label) in enumerate(rows))]


def pairs_files(tmp_path: Path) -> dict[str, str]:
    words = ["cat", "dog", "bird", "fish", "cow", "horse", "sheep", "goat"]
    lines = [f"{w} {v}\t{v} {w}" for w in words for v in words if w != v]  # swap two words
    return {f"{split}_file": str(write(tmp_path / f"{split}.tsv", lines)) for split in SPLITS}
