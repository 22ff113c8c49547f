"""`attnx report --pareto state`: each lm run's recorded decoding state becomes the Pareto view's third cost
and draws accuracy against state, a line per mechanism through its widths; without a recorded state, or
with --bench, it refuses in one line."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from attnx.cli import main as cli
from attnx.track.results import write_results

# (attention, lm.d_model, attention.window) -> (state bytes, test/acc of seeds 0 and 1); None: undeclared
RUNS = {
    ("multi_head", 16, None): (8192, (0.60, 0.62)),
    ("multi_head", 32, None): (16384, (0.97, 0.99)),
    ("linear", 16, None): (1088, (0.20, 0.22)),
    ("linear", 32, None): (4224, (0.50, 0.48)),
    ("sliding_window", 32, 4): (2048, (0.30, 0.30)),
    ("sliding_window", 32, 8): (4096, (0.40, 0.42)),
    ("mystery", 32, None): (None, (0.10, 0.12)),
}


def record(attention: str, width: int, window: int | None, seed: int, state: int | None, acc: float) -> dict:
    overrides = [f"attention={attention}", f"lm.d_model={width}", f"seed={seed}"]
    overrides += [] if window is None else [f"attention.window={window}"]
    return {
        "status": "completed",
        "overrides": overrides,
        "choices": {"task": "mqar", "encoder": None, "attention": attention, "score": None},
        "config": {"task": {"name": "mqar"}, "lm": {"d_model": width}, "seed": seed},
        "model_type": "lm",
        "metrics": {"test/acc": acc, "val/acc": acc},
        "params": 1000 * width,
        "train_seconds": 5.0,
        "state_bytes": state,
        "state_at": 64,
    }


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    runs = [
        record(a, d, w, seed, state, acc)
        for (a, d, w), (state, accs) in RUNS.items()
        for seed, acc in enumerate(accs)
    ]
    for i, run in enumerate(runs):
        write_results(tmp_path / "multirun" / str(i), run)
    return tmp_path / "multirun"


def test_the_state_is_the_third_cost_and_its_figure_is_drawn(
    sweep: Path, capsys: pytest.CaptureFixture
) -> None:
    assert cli(["report", str(sweep), "--pareto", "state", "--metric", "test/acc"]) == 0
    out = capsys.readouterr().out
    assert "test_acc_vs_state.png" in out
    report = (sweep / "report.md").read_text()
    cost = report[report.index("## Cost") :]
    assert "state bytes" in cost.splitlines()[2]
    assert " 16,384 |" in cost and " 1,088 |" in cost
    assert "No declared state, so not on the state axis: mystery" in cost
    assert (sweep / "test_acc_vs_state.png").stat().st_size > 0
    with (sweep / "report.csv").open() as handle:
        rows = {(r["attention"], r["lm.d_model"], r["attention.window"]): r for r in csv.DictReader(handle)}
    assert rows[("sliding_window", "32", "8")]["state_bytes"] == "4096"  # every row, the cost table's or not
    assert rows[("mystery", "32", "")]["state_bytes"] == ""


def test_without_pareto_state_the_report_has_no_state(sweep: Path) -> None:
    assert cli(["report", str(sweep), "--metric", "test/acc"]) == 0
    assert not (sweep / "test_acc_vs_state.png").exists()
    assert "state bytes" not in (sweep / "report.md").read_text()


def test_runs_without_a_recorded_state_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for i in range(2):
        run = record("linear", 16, None, i, None, 0.5)
        write_results(tmp_path / str(i), {k: v for k, v in run.items() if not k.startswith("state")})
    assert cli(["report", str(tmp_path), "--pareto", "state"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnx report: --pareto state: no completed run records a decoding state")
    assert len(err.splitlines()) == 1


def test_state_and_bench_are_one_axis(sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bench = tmp_path / "bench.csv"
    bench.write_text("module,N,ms\nlinear,64,1.0\n")
    assert cli(["report", str(sweep), "--pareto", "state", "--bench", str(bench)]) == 2
    err = capsys.readouterr().err
    assert "--pareto state puts the decoding state where --bench's inference ms goes" in err
