"""The cost table says what compiling cost and which runs paid for it: a run whose regions generated
code (Inductor cache misses) paid; a later one found it in the sweep's cache."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_report_integrity import record, report

from attnx.track.results import write_results

COLD = {"regions": {}, "seconds": 30.0, "graphs": 4, "cache_hits": 0, "cache_misses": 4}
WARM = {"regions": {}, "seconds": 4.0, "graphs": 4, "cache_hits": 4, "cache_misses": 0}


def test_the_cost_table_says_which_runs_compiled_afresh(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    runs = [("additive", 0, COLD), ("additive", 1, WARM), ("dot", 0, None), ("dot", 1, None)]
    for i, (attention, seed, compiled) in enumerate(runs):
        write_results(tmp_path / str(i), record(attention, 0.9, seed) | {"compile": compiled})
    _, md, _ = report(tmp_path, capsys)
    cost = md.split("## Cost")[1]
    assert "of which compiling" in cost
    additive = next(line for line in cost.splitlines() if "| additive" in line)
    dot = next(line for line in cost.splitlines() if "| dot" in line)
    assert "17.0 (1 of 2 compiled afresh)" in additive and "compiled afresh" not in dot


def test_without_compiled_runs_the_cost_table_has_no_compile_column(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    for i, attention in enumerate(("additive", "dot")):
        write_results(tmp_path / str(i), record(attention, 0.9) | {"compile": None})
    _, md, _ = report(tmp_path, capsys)
    assert "## Cost" in md and "of which compiling" not in md
