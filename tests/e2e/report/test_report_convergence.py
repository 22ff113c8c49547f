"""`attnx report` shows how many runs of each configuration converged (results.json's `convergence`,
attnx.track.convergence), says the rule under the table, and draws the validation curves."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from attnx.cli import main as cli
from attnx.track.results import write_results


def record(attention: str, seed: int, converged: bool | None) -> dict:
    verdict = {
        "metric": "val/exact_match",
        "tolerance": 0.005,
        "ceiling": 1.0,
        "validations": 12 if converged is not None else 3,
        "improvement": 0.0 if converged else 0.04,
        "converged": converged,
        "reason": "plateaued" if converged else "still improving",
    }
    return {
        "status": "completed",
        "overrides": [f"attention={attention}", f"seed={seed}"],
        "choices": {"task": "reverse", "encoder": "rnn", "attention": attention, "score": None},
        "config": {"task": {"name": "reverse"}, "seed": seed},
        "model_type": "seq2seq",
        "metrics": {"test/exact_match": 0.5 + seed / 10, "test/token_acc": 0.8},
        "params": 1000,
        "train_seconds": 1.0,
        "samples_per_second": 100.0,
        "curve": {"val/exact_match": [[10, 0.4], [20, 0.5]]},
        "convergence": verdict,
    }


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    # dot: both converged; additive: one still improving; none: no verdict (too few validations)
    verdicts = {"dot": (True, True), "additive": (True, False), "none": (None, None)}
    for i, (attention, seed) in enumerate((a, s) for a in verdicts for s in (0, 1)):
        write_results(tmp_path / str(i), record(attention, seed, verdicts[attention][seed]))
    return tmp_path


def test_each_row_says_how_many_of_its_runs_converged(sweep: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli(["report", str(sweep)]) == 0
    table = capsys.readouterr().out.split("\n\n")[0].splitlines()
    header = [c.strip() for c in table[0].strip("| ").split("|")]
    column = header.index("converged")
    cells = {r.split("|")[1].strip(): r.split("|")[column + 1].strip() for r in table[2:]}
    assert cells == {"additive": "still improving (1 of 2)", "dot": "converged 2/2", "none": "–"}
    report = (sweep / "report.md").read_text()
    assert "Converged k/n" in report and "val/exact_match" in report and "(0.005)" in report
    assert "![validation curves](validation_curves.png)" in report
    with (sweep / "report.csv").open() as handle:
        rows = {r["attention"]: r["converged"] for r in csv.DictReader(handle)}
    assert rows == {"additive": "still improving (1 of 2)", "dot": "converged 2/2", "none": ""}


def test_records_without_a_verdict_add_no_column(sweep: Path, capsys: pytest.CaptureFixture) -> None:
    for path in sweep.rglob("results.json"):  # records written before curves were kept
        path.write_text(path.read_text().replace('"convergence"', '"other"'))
    assert cli(["report", str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "converged" not in out.split("\n\n")[0]
    assert "Converged k/n" not in (sweep / "report.md").read_text()
    assert not (sweep / "validation_curves.png").exists()
