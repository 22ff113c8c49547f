"""Every table and measured number README.md and benchmarks/README.md publish is what a committed results
file renders (benchmarks/publish.py), and every benchmark script has its results file. Reads files only:
it runs no benchmark."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from helpers.paths import REPO

_spec = importlib.util.spec_from_file_location("publish", REPO / "benchmarks" / "publish.py")
publish = sys.modules[_spec.name] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(publish)

NOT_BENCHMARKS = {"common", "publish"}  # what the scripts share, and the renderer itself
# a time, a size, a speed-up or a share, not a goal (after ≥, ≤, <, >) and not in a command line
FIGURE = re.compile(r"(?<![≥≤<>] )(?<![\w.])\d[\d.,]*\s?(?:ms|µs|s|min|MiB|GiB|×|%)(?![\w/])")
UNMEASURED = {  # the figures benchmarks/README.md may state outside a results block: none is a measurement
    "15 min": "the load average's third window",
    "4 GiB": "one fp32 N×N matrix per head at N = 8192, by arithmetic",
    "16×": "that matrix against the linear memory budget, by arithmetic",
    "95%": "the Joey NMT reference's threshold",
    "97.9%": "the Joey NMT reference's own figure (time_to_accuracy.REFERENCE)",
    "15 s": "the default --budget",
}


def test_every_marked_block_is_what_its_results_file_renders() -> None:
    assert not publish.problems(), "\n".join(publish.problems())


def test_every_benchmark_script_has_a_results_file_and_each_is_published() -> None:
    scripts = {p.stem for p in (REPO / "benchmarks").glob("*.py")} - NOT_BENCHMARKS
    files = {p.name: json.loads(p.read_text())["script"] for p in publish.RESULTS.glob("*.json")}
    assert not scripts - set(files.values()), "a benchmark without a committed results file"
    cited = {
        name for document in publish.DOCUMENTS for block in publish.blocks(document) for name in block.files
    }
    assert not set(files) - cited, "a results file no document publishes"


def test_benchmarks_readme_states_no_figure_outside_a_results_block() -> None:
    """A figure typed into prose is what drifts: every measured one sits in a block publish.py renders."""
    text = (REPO / "benchmarks" / "README.md").read_text()
    prose = re.sub(r"^    .*$", "", publish.BLOCK.sub("", text), flags=re.M)  # blocks, indented commands
    assert sorted(set(FIGURE.findall(prose)) - set(UNMEASURED)) == []


RESULT = {
    "command": "python benchmarks/toy.py",
    "date": "2026-12-03 10:00 UTC",
    "wall_seconds": 12.0,
    "commit": {"sha": "0123456789abcdef", "dirty": False},
    "machine": {
        "cpu": "a CPU",
        "cores": 2,
        "ram_gib": 23.4,
        "gpu": None,
        "python": "3.11.7",
        "torch": "2.13.0+cpu",
        "lightning": "2.6.6",
        "threads": 1,
    },
    "load": {"before": [1.0, 1.0, 1.0], "after": [2.0, 2.0, 2.0]},
    "values": {"speedup": 2.154},
    "tables": {"steps": {"header": ["step", "ms"], "rows": [["train", 269.92]], "right_from": 1}},
    "headlines": [{"what": "toy", "goal": "≥ 1.5×", "measured": "2.15×", "verdict": "met"}],
}
DOCUMENT = """# Toy
<!-- results: toy.json run -->Measured by `python benchmarks/toy.py` on 2026-12-03 10:00 UTC at commit \
0123456789, in 12 s: a CPU, 2 cores, 23.4 GiB RAM, no GPU; Python 3.11.7, torch 2.13.0+cpu, Lightning \
2.6.6, 1 thread(s); load average 1.0 before, 2.0 after.<!-- /results -->

<!-- results: toy.json steps -->
| step  |     ms |
| ----- | -----: |
| train | 269.92 |
<!-- /results -->

Hoisting is <!-- results: toy.json "{speedup:.2f}×" -->2.15×<!-- /results --> faster.

<!-- results: toy.json headlines -->
| what | command                    | goal   | measured |     |
| ---- | -------------------------- | ------ | -------- | --- |
| toy  | `python benchmarks/toy.py` | ≥ 1.5× | 2.15×    | met |
<!-- /results -->
"""


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "toy.json").write_text(json.dumps(RESULT))
    monkeypatch.setattr(publish, "RESULTS", tmp_path)
    document = tmp_path / "README.md"
    document.write_text(DOCUMENT)
    return document


def test_a_document_that_agrees_passes(toy: Path) -> None:
    assert publish.problems((toy,)) == []


@pytest.mark.parametrize(
    ("edit", "line"),
    [("269.92", 4), ("2.15×<!--", 10), ("2.0 after", 2), ("| met |", 12)],
    ids=["table cell", "number in prose", "provenance", "headline"],
)
def test_a_number_edited_by_hand_fails_and_publish_restores_it(toy: Path, edit: str, line: int) -> None:
    toy.write_text(DOCUMENT.replace(edit, edit.replace("2", "3").replace("met", "missed"), 1))
    found = publish.problems((toy,))
    assert len(found) == 1 and f"README.md:{line} " in found[0], found
    assert publish.publish(toy) == [] and toy.read_text() == DOCUMENT


def test_a_missing_results_file_or_value_fails(toy: Path) -> None:
    toy.write_text(DOCUMENT.replace("toy.json steps", "gone.json steps").replace("{speedup", "{slowdown"))
    found = publish.problems((toy,))
    assert len(found) == 2 and "no results file benchmarks/results/gone.json" in found[0], found
    assert "has no value 'slowdown'" in found[1]
