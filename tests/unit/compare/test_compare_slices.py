"""The compare report's test slices on fabricated rows: arms ranked per multiple, a curve per task."""

from __future__ import annotations

from pathlib import Path

from attnx.compare.slices import slices_section
from attnx.report.document import Image, Table
from attnx.report.runs import Row, default_metrics


def row(task: str, arm: str, by_multiple: dict[int, list[float]]) -> Row:
    seeds = len(next(iter(by_multiple.values())))
    runs = []
    for seed in range(seeds):
        metrics = {
            ("test/exact_match" if k == 1 else f"test@{k}x/exact_match"): v[seed]
            for k, v in by_multiple.items()
        }
        runs.append({"model_type": "seq2seq", "metrics": {**metrics, "test/token_acc": 1.0}})
    return Row((task, arm), runs)


ROWS = [
    # dot best in distribution, additive best at 2x and 4x: a headline ranking would hide the swap
    row("reverse", "dot", {1: [1.0, 1.0, 1.0], 2: [0.3, 0.4, 0.35], 4: [0.0, 0.0, 0.0]}),
    row("reverse", "additive", {1: [0.9, 0.92, 0.91], 2: [0.6, 0.7, 0.65], 4: [0.2, 0.1, 0.15]}),
    row("listops", "dot", {1: [0.5, 0.6, 0.55]}),  # no slices: no table
]


def test_each_multiple_ranks_the_arms_and_each_task_gets_a_curve(tmp_path: Path) -> None:
    metrics = {"reverse": "test/exact_match", "listops": "test/exact_match"}
    section = slices_section(ROWS, metrics, tmp_path, highlight="additive")
    assert section is not None
    (table,) = [p for p in section.parts if isinstance(p, Table)]
    (image,) = [p for p in section.parts if isinstance(p, Image)]
    assert table.header == [
        "reverse: mechanism",
        *("1× exact_match", "1× rank", "2× exact_match", "2× rank", "4× exact_match", "4× rank"),
    ]
    assert table.body == [
        ["dot", "1.000", "1", "0.350", "2", "0.000", "2"],
        ["additive", "0.910", "2", "0.650", "1", "0.150", "1"],
    ]
    assert image.path == tmp_path / "slices_reverse.png" and image.path.stat().st_size > 0


def test_no_slices_no_section(tmp_path: Path) -> None:
    assert slices_section(ROWS[2:], {"listops": "test/exact_match"}, tmp_path) is None


def test_report_default_metrics_show_each_slice_twin() -> None:
    runs = [r for each in ROWS for r in each.runs]
    assert default_metrics(runs) == [
        "test/exact_match",
        "test@2x/exact_match",
        "test@4x/exact_match",
        "test/token_acc",
    ]
