"""Budgets that follow the curve, end to end: a compare continues every run still improving, a budget at a
time, up to `budget_cap`; the report gives the budget each arm used and calls what is still improving at the
cap not converged at the cap; the same compare launched again trains nothing; a second compare takes the
continued baselines from the run store at their final budget; a cap below 1, and a decaying schedule under
a cap above 1, are one line each and train nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_compare import suite as cosine_suite

from attnx.cli import main as cli

from helpers.markdown import table

SUITE = """# @package _global_
seeds: [0]
budget_cap: 3
tasks:
  reverse:
    overrides: [task=reverse, task.min_len=3, task.max_len=5, task.train_size=48, task.val_size=16,
                task.test_size=16, trainer.max_epochs=1, trainer.val_check_interval=0.25,
                optim/scheduler=constant, optim.scheduler.warmup_steps=0, encoder.embed_dim=8,
                encoder.hidden_dim=16, decoder.embed_dim=8, decoder.hidden_dim=16]
    metric: test/exact_match
"""
ARGS = ["suite=curve", "mechanisms=[none,additive]", "bench.n=16", "bench.dim=16", "bench.heads=2"]
ARGS += ["launcher=basic", "attention=local_window"]


@pytest.fixture
def curve_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`suite=curve`, whose every run's curve is judged still improving (the runs are in-process: the basic
    launcher), so that what a compare does with such runs does not hang on what tiny runs learn."""
    import attnx.lit.convergence

    rule = attnx.lit.convergence.convergence
    monkeypatch.setattr(
        attnx.lit.convergence,
        "convergence",
        lambda *args, **kwargs: {**rule(*args, **kwargs), "converged": False, "reason": "still improving"},
    )
    (tmp_path / "conf" / "suite").mkdir(parents=True)
    (tmp_path / "conf" / "suite" / "curve.yaml").write_text(SUITE)
    monkeypatch.setenv("ATTNX_CONFIG_PATH", str(tmp_path / "conf"))
    monkeypatch.chdir(tmp_path)


def runs(out: Path) -> dict[str, dict]:
    found = [json.loads(p.read_text()) for p in (out / "runs").glob("*/results.json")]
    return {r["choices"]["attention"]: r for r in found}


@pytest.mark.usefixtures("curve_suite")
def test_runs_still_improving_are_continued_to_the_cap_and_stored_there(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    store = f"store={tmp_path / 'store'}"
    first = tmp_path / "first"
    assert cli(["compare", *ARGS, store, "attention.window=1", f"out={first}"]) == 0
    said = capsys.readouterr().out
    assert "3 run(s) still improving at 1× budget: continued to 2× (budget_cap=3)" in said
    assert "3 run(s) still improving at 2× budget: continued to 3× (budget_cap=3)" in said
    assert re.search(r"\[\d/3\] reverse additive seed 0 at 3× budget: test/exact_match", said), said
    trained = runs(first)
    for run in trained.values():
        assert run["epochs"] == 3 and "trainer.max_epochs=3" in run["overrides"]
        assert run["resumed_from"] and run["convergence"]["converged"] is False
    report = (first / "report.md").read_text()
    rows = {cells[0]: cells[1] for cells in table(report, "| mechanism | reverse")}
    assert all(cell.startswith("3× · 3 epochs · ") for cell in rows.values()), rows
    assert all(cell.endswith(" s · 1 of 1 still improving at the cap") for cell in rows.values()), rows
    assert "not converged at the budget cap (3× the task's budget)" in report

    stamps = {p: p.stat().st_mtime_ns for p in first.glob("runs/*/results.json")}
    assert cli(["compare", *ARGS, store, "attention.window=1", f"out={first}"]) == 0
    assert "all 3 runs completed" in capsys.readouterr().out  # each at 3×: nothing launched again
    assert {p: p.stat().st_mtime_ns for p in first.glob("runs/*/results.json")} == stamps

    second = tmp_path / "second"
    assert cli(["compare", *ARGS, store, "attention.window=2", f"out={second}"]) == 0
    again = runs(second)
    for arm in ("none", "additive"):  # the baselines at their final budget, from the store
        assert again[arm]["stored"] and again[arm]["epochs"] == 3
        assert again[arm]["metrics"] == trained[arm]["metrics"]
        kept = sorted(p.name for p in Path(again[arm]["output_dir"], "checkpoints").glob("*.ckpt"))
        assert kept == sorted(p.name for p in Path(trained[arm]["output_dir"], "checkpoints").glob("*.ckpt"))
    assert "stored" not in again["local_window"] and again["local_window"]["epochs"] == 3


@pytest.mark.usefixtures("curve_suite")
@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("budget_cap=0", "budget_cap=0: the most budgets a run still improving trains for: >= 1"),
        ("budget_cap=-2", "budget_cap=-2: the most budgets a run still improving trains for: >= 1"),
        ("budget_cap=two", "budget_cap"),
    ],
)
def test_a_cap_below_one_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, given: str, said: str
) -> None:
    assert cli(["compare", *ARGS, given, f"out={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attnx compare: ") and said in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_decaying_schedule_is_refused_under_a_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("ATTNX_CONFIG_PATH", str(cosine_suite(tmp_path)))  # the default warm-up and cosine
    args = ["suite=tiny", "mechanisms=[none,additive]", "attention=local_window", "launcher=basic"]
    out = tmp_path / "out"
    assert cli(["compare", *args, "budget_cap=2", f"out={out}"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("attnx compare: budget_cap=2: suite task reverse's learning-rate schedule ("), line
    assert "cosine=True" in line and "optim/scheduler=constant" in line and "budget_cap=1" in line
    assert not out.exists()


@pytest.mark.usefixtures("curve_suite")
def test_the_plan_says_continuations_are_not_counted(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli(["compare", *ARGS, "attention.window=1", "--plan", f"out={tmp_path / 'out'}"]) == 0
    said = capsys.readouterr().out
    assert "3 runs (0 of them the learning-rate search)" in said
    assert "continued, a budget at a time, up to 3 budgets (budget_cap): not counted here." in said
    assert not (tmp_path / "out").exists()
