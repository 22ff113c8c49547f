"""`state_plot`: quality against decoding state, a line per value of the compared key joining its rows in
order of state, one panel per task; nothing to draw when no line has two points."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from attnx.report import figures
from attnx.report.runs import Row

COLUMNS = ["task", "attention", "lm.d_model"]
# `drawn` replaces the lines, so matplotlib's legend finds no labelled artist
pytestmark = pytest.mark.filterwarnings("ignore:No artists with labels found:UserWarning")


def row(task: str, attention: str, width: int, acc: float) -> Row:
    run = {"status": "completed", "metrics": {"test/acc": acc}, "choices": {"task": task}}
    return Row((task, attention, width), [run])


def drawn(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[Any], list[float]]]:
    lines: list[tuple[str, list[Any], list[float]]] = []
    monkeypatch.setattr(figures, "_line", lambda ax, xs, ys, label, *rest: lines.append((label, xs, ys)))
    return lines


def test_each_mechanism_is_one_line_through_its_widths_in_order_of_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = drawn(monkeypatch)
    rows = [row("mqar", "linear", 32, 0.5), row("mqar", "linear", 16, 0.2), row("mqar", "softmax", 16, 0.9)]
    state = {rows[0].values: 4224, rows[1].values: 1088, rows[2].values: 8192}
    path = figures.state_plot(rows, COLUMNS, "attention", state, "test/acc", tmp_path, [])
    assert path == tmp_path / "test_acc_vs_state.png" and path.exists()
    assert lines == [("linear", [1088, 4224], [0.2, 0.5]), ("softmax", [8192], [0.9])]


def test_tasks_are_panels_and_a_row_without_state_is_not_drawn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = drawn(monkeypatch)
    rows = [row(t, "linear", d, 0.1 * d / 16) for t in ("mqar", "recall") for d in (16, 32)]
    rows.append(row("mqar", "mystery", 16, 0.3))
    state = {r.values: 100 * r.values[2] for r in rows[:4]} | {rows[4].values: None}
    assert figures.state_plot(rows, COLUMNS, "attention", state, "test/acc", tmp_path, []) is not None
    assert lines == [("linear", [1600, 3200], [0.1, 0.2])] * 2  # one line in each task's panel


def test_nothing_is_drawn_when_no_line_has_two_points(tmp_path: Path) -> None:
    rows = [row("mqar", "linear", 16, 0.2), row("mqar", "softmax", 16, 0.9)]
    state = {r.values: 1000 * (i + 1) for i, r in enumerate(rows)}
    assert figures.state_plot(rows, COLUMNS, "attention", state, "test/acc", tmp_path, []) is None
