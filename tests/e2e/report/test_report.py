"""`attnx report` on a sweep's results.json files: rows, seeds, failed runs, CSV, plots, no torch."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from attnx.cli import main as cli
from attnx.track.results import write_results

# A length sweep of two mechanisms with two seeds each, plus one run that crashed.
EXACT = {
    ("fixed_c", 8): (0.80, 0.70),
    ("fixed_c", 16): (0.10, 0.20),
    ("additive", 8): (0.90, 1.0),
    ("additive", 16): (0.95, 0.85),
}


def record(attention: str, length: int, seed: int, exact: float | None) -> dict:
    overrides = [f"attention={attention}", f"task.max_len={length}", f"seed={seed}", "+experiment=lengths"]
    common = {
        "overrides": overrides,
        "choices": {"task": "reverse", "encoder": "rnn", "attention": attention, "score": None},
        "config": {"task": {"name": "reverse", "max_len": length}, "seed": seed},
        "model_type": "seq2seq",
    }
    if exact is None:
        return common | {"status": "failed", "error": "RuntimeError: boom\nmore lines"}
    metrics = {"test/exact_match": exact, "test/token_acc": (1 + exact) / 2, "val/loss": 1 - exact}
    return common | {
        "status": "completed",
        "metrics": metrics,
        "params": 1000 + length,
        "train_seconds": 10.0,
        "samples_per_second": 500.0,
    }


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    folder = tmp_path / "multirun"
    runs = [record(a, n, seed, exact[seed]) for (a, n), exact in EXACT.items() for seed in (0, 1)]
    for i, run in enumerate([*runs, record("dot", 8, 0, None)]):
        write_results(folder / str(i), run)
    return folder


def test_rows_are_configurations_with_seeds_averaged_and_failures_apart(
    sweep: Path, capsys: pytest.CaptureFixture
) -> None:
    assert cli(["report", str(sweep)]) == 0
    table, failed = capsys.readouterr().out.split("runs that did not complete:")
    lines = table.strip().splitlines()
    assert [c.strip() for c in lines[0].strip("| ").split("|")][:4] == [
        "attention",
        "task.max_len",
        "n",
        "test/exact_match",
    ]
    rows = [[c.strip() for c in line.strip("| ").split("|")] for line in lines[2:]]
    assert [row[:3] for row in rows] == [
        ["additive", "8", "2"],
        ["additive", "16", "2"],
        ["fixed_c", "8", "2"],
        ["fixed_c", "16", "2"],
    ]
    assert rows[0][3] == "0.950 ± 0.071 [0.900, 1.000]" and rows[0][-3:] == ["1,008", "10.0", "500"]
    assert "| dot " in failed and "RuntimeError: boom" in failed and "more lines" not in failed

    report = (sweep / "report.md").read_text()
    assert "8/9 runs completed; 1 failed." in report and "`experiment=lengths`" in report
    assert "Best test/exact_match: 0.9500 (attention=additive, task.max_len=8)" in report
    plot = sweep / "test_exact_match_vs_task.max_len.png"
    assert plot.read_bytes().startswith(b"\x89PNG") and f"]({plot.name})" in report
    with (sweep / "report.csv").open() as handle:
        written = list(csv.DictReader(handle))
    assert [r["status"] for r in written] == ["completed"] * 4 + ["failed"]
    assert float(written[3]["test/exact_match"]) == pytest.approx(0.15)


def test_chosen_metric_and_x_and_output_folder(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli(["report", str(sweep), "--metric", "val/loss", "--x", "task.max_len", "--out", str(out)]) == 0
    assert (out / "val_loss_vs_task.max_len.png").exists()
    header = next(line for line in (out / "report.md").read_text().splitlines() if line.startswith("|"))
    assert [c.strip() for c in header.strip("| ").split("|")][2:4] == ["n", "val/loss"]
    assert cli(["report", str(sweep), "--x", "attention"]) == 2  # not numeric: no line plot against it


def test_report_never_imports_torch(sweep: Path) -> None:
    code = (
        "import sys; from attnx.cli import main; main(['report', sys.argv[1]]); "
        "assert not {'torch', 'lightning'} & set(sys.modules), 'heavy import'"
    )
    subprocess.run([sys.executable, "-c", code, str(sweep)], check=True, capture_output=True)


def test_select_keeps_each_rows_best_learning_rate_on_validation_and_panels_split_the_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # val/acc picks the rate; test/acc is what the row then reports (the paper's protocol)
    val = {("dot", 32, 0.01): 0.9, ("dot", 32, 0.1): 0.5, ("dot", 64, 0.01): 0.2, ("dot", 64, 0.1): 0.8}
    for i, ((attention, width, lr), score) in enumerate(val.items()):
        for length in (64, 128):
            overrides = [
                f"attention={attention}",
                f"lm.d_model={width}",
                f"optim.lr={lr}",
                f"task.seq_len={length}",
            ]
            write_results(
                tmp_path / f"{i}-{length}",
                {
                    "status": "completed",
                    "overrides": overrides,
                    "choices": {"task": "mqar", "attention": attention},
                    "config": {"lm": {"d_model": width}, "optim": {"lr": lr}, "task": {"seq_len": length}},
                    "model_type": "lm",
                    "metrics": {"val/acc": score, "test/acc": score - 0.05, "test/exact_match": 0.0},
                },
            )
    args = ["report", str(tmp_path), "--x", "lm.d_model", "--select", "optim.lr", "--metric", "test/acc"]
    assert cli([*args, "--by", "val/acc", "--panel", "task.seq_len", "--out", str(tmp_path / "a")]) == 0
    rows = list(csv.DictReader((tmp_path / "a" / "report.csv").open()))
    chosen = {(r["lm.d_model"], r["task.seq_len"]): (r["optim.lr"], float(r["test/acc"])) for r in rows}
    assert chosen == {
        ("32", "64"): ("0.01", 0.85),
        ("32", "128"): ("0.01", 0.85),
        ("64", "64"): ("0.1", 0.75),
        ("64", "128"): ("0.1", 0.75),
    }
    assert cli([*args, "--out", str(tmp_path / "b")]) == 0  # --by defaults to the metric's val/ twin
    assert (tmp_path / "b" / "report.csv").read_text() == (tmp_path / "a" / "report.csv").read_text()
    from matplotlib.image import imread

    two_panels = imread(tmp_path / "a" / "test_acc_vs_lm.d_model.png").shape[1]
    one_panel = imread(tmp_path / "b" / "test_acc_vs_lm.d_model.png").shape[1]
    assert two_panels > one_panel  # one panel per task.seq_len, side by side
    assert cli([*args, "--select", "optim.momentum"]) == 2
    assert "--select optim.momentum is not a swept key" in capsys.readouterr().err
