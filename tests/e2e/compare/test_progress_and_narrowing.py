"""What a compare prints while it runs (a line per finished run; Hydra's launch lines to a log file), and
`tasks=[...]` on its command line: a subset of the suite's tasks runs, the report says which were left out,
and a name the suite lacks is one line (exit 2) before anything trains."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_compare import ARGS, suite

from attnx.cli import main as cli


def test_a_line_per_finished_run_and_tasks_narrows_the_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("ATTNX_CONFIG_PATH", str(suite(tmp_path)))
    out = tmp_path / "out"
    assert cli(["compare", *ARGS, "tasks=[reverse]", "seeds=1", f"out={out}"]) == 0
    said = capfd.readouterr()
    lines = [line for line in said.out.splitlines() if re.match(r"attnx compare: \[\d/3\]", line)]
    assert len(lines) == 3 and lines[-1].startswith("attnx compare: [3/3] reverse "), said.out
    outcome = (
        r"seed 0: test/exact_match \d\.\d{4}, (converged|still improving|no convergence verdict) · \d+:\d\d"
    )
    assert all(re.search(outcome, line) for line in lines), lines
    assert "run folder:" not in said.out  # the runs' own tables (summary=false): compare's line is theirs
    assert "[HYDRA]" not in said.out + said.err and "Launching" in (out / "runs" / "launch.log").read_text()
    runs = [json.loads(p.read_text()) for p in (out / "runs").glob("*/results.json")]
    assert {r["choices"]["task"] for r in runs} == {"reverse"} and len(runs) == 3  # none, additive, candidate
    assert "narrowed by `tasks=` (left out: mqar)" in (out / "report.md").read_text()


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (
            "tasks=[reverse,nope]",
            "tasks=['reverse', 'nope']: nope is not a task of suite tiny; its tasks: reverse, mqar",
        ),
        ("tasks=[]", "tasks=[]: name at least one of the suite's tasks, or leave tasks= out"),
    ],
)
def test_a_task_the_suite_lacks_is_one_line_and_trains_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, given: str, said: str
) -> None:
    monkeypatch.setenv("ATTNX_CONFIG_PATH", str(suite(tmp_path)))
    out = tmp_path / "out"
    assert cli(["compare", *ARGS, given, f"out={out}"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"attnx compare: {said}"]
    assert not out.exists()
