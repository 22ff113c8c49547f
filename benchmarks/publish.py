"""Render every published table and measured number from its results file, in README.md and
benchmarks/README.md, so that a document cannot say what no committed measurement says.

A marked block is `<!-- results: FILE VIEW -->…<!-- /results -->`: FILE a results file under
benchmarks/results/ (what `common.record` writes), VIEW one of
- a table's name: that table, as the script printed it;
- a text's name: that output, as a ```text block;
- `run`: one line saying what ran, where and when (command, date, commit, machine, load, wall time);
- `headlines`: benchmarks/README.md's summary, one row per headline of each FILE (comma-separated);
- a double-quoted format, `"{speedup:.2f}×"`: `str.format` over the file's `values` and its top-level
  fields (`{machine[cpu]}`), for a number in prose.
A block whose marker ends its line holds lines (a table); one inside a line holds text.

    python benchmarks/publish.py          # rewrite every block from its results file
    python benchmarks/publish.py --check  # name every block that differs and every missing file; exit 1
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnx.table import markdown_table

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DOCUMENTS = (REPO / "README.md", REPO / "benchmarks" / "README.md")
BLOCK = re.compile(r"<!-- results: (?P<spec>.*?) -->(?P<body>.*?)<!-- /results -->", re.S)


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    files: tuple[str, ...]
    view: str
    body: str

    @property
    def where(self) -> str:
        shown = self.document.relative_to(REPO) if self.document.is_relative_to(REPO) else self.document
        return f"{shown}:{self.line} ({','.join(self.files)} {self.view})"


class MissingResults(Exception):
    """A block cites a results file that does not exist, or a table or value the file lacks."""


def blocks(document: Path) -> list[Block]:
    text = document.read_text()
    found = []
    for match in BLOCK.finditer(text):
        files, view = shlex.split(match["spec"])
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(document, line, tuple(files.split(",")), view, match["body"]))
    return found


def load(name: str) -> dict[str, Any]:
    path = RESULTS / name
    if not path.exists():
        raise MissingResults(f"no results file benchmarks/results/{name}: run the benchmark that writes it")
    return json.loads(path.read_text())


def render(files: tuple[str, ...], view: str) -> str:
    """What a block of `files` and `view` holds."""
    docs = [load(name) for name in files]
    if view == "headlines":
        rows = [
            [h["what"], f"`{d['command']}`", h["goal"], h["measured"], h["verdict"]]
            for d in docs
            for h in d["headlines"]
        ]
        return markdown_table(["what", "command", "goal", "measured", ""], rows)
    (doc,) = docs
    if view == "run":
        return provenance(doc)
    if "{" in view:
        try:
            return view.format_map({**doc, **doc["values"]})
        except (KeyError, IndexError) as error:
            raise MissingResults(f"{files[0]} has no value {error}") from None
    if view in doc.get("texts", {}):
        return f"```text\n{doc['texts'][view]}\n```"
    if view not in doc["tables"]:
        raise MissingResults(f"{files[0]} has no table or text {view!r}")
    t = doc["tables"][view]
    return markdown_table(t["header"], t["rows"], t["right_from"])


def provenance(doc: dict[str, Any]) -> str:
    m, load, commit = doc["machine"], doc["load"], doc["commit"]
    if commit is None:
        at = "no git checkout"
    else:
        at = commit["sha"][:10] + (" with uncommitted changes" if commit["dirty"] else "")
    wall = doc["wall_seconds"]
    took = f"{wall / 60:.1f} min" if wall >= 90 else f"{wall:.0f} s"
    return (
        f"Measured by `{doc['command']}` on {doc['date']} at commit {at}, in {took}: {m['cpu']}, "
        f"{m['cores']} cores, {m['ram_gib']} GiB RAM, {m['gpu'] or 'no GPU'}; Python {m['python']}, torch "
        f"{m['torch']}, Lightning {m['lightning']}, {m['threads']} thread(s); load average "
        f"{load['before'][0]:.1f} before, {load['after'][0]:.1f} after."
    )


def rendered(block: Block) -> str:
    """The block's body as its results file renders it: lines of their own when the marker ends its line."""
    text = render(block.files, block.view)
    return f"\n{text}\n" if block.body.startswith("\n") else text


def problems(documents: tuple[Path, ...] = DOCUMENTS) -> list[str]:
    """Each block that differs from its rendering, and each it cannot render (a missing file or value)."""
    found = []
    for document in documents:
        for block in blocks(document):
            try:
                if block.body != rendered(block):
                    found.append(f"{block.where}: differs from its results file (benchmarks/publish.py)")
            except MissingResults as error:
                found.append(f"{block.where}: {error}")
    return found


def publish(document: Path) -> list[str]:
    """Rewrite the document's blocks; what could not be rendered (those blocks are left as they are)."""
    missing: list[str] = []
    marked = iter(blocks(document))

    def replace(match: re.Match[str]) -> str:
        block = next(marked)
        try:
            return f"<!-- results: {match['spec']} -->{rendered(block)}<!-- /results -->"
        except MissingResults as error:
            missing.append(f"{block.where}: {error}")
            return match[0]

    document.write_text(BLOCK.sub(replace, document.read_text()))
    return missing


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="change nothing; list what differs (exit 1)")
    args = p.parse_args()
    found = problems() if args.check else [m for d in DOCUMENTS for m in publish(d)]
    print("\n".join(found) or "every marked block is what its results file renders")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
