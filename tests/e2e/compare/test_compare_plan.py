"""An lm plan (`lm.layers=[...]`) as an arm of `attnx compare`: labelled by its layers' mechanisms, trained
beside the classic arms, ranked in the report; given with a mechanism, or without names, one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnx.cli import main as cli

SUITE = """# @package _global_
seeds: [0]
tasks:
  mqar:
    overrides: [task=mqar, task.vocab_size=16, task.seq_len=16, task.num_kv_pairs=2, task.train_size=32,
                task.val_size=16, task.test_size=16, lm.d_model=16, lm.num_layers=2, trainer.max_epochs=1,
                optim.scheduler.warmup_steps=0]
    metric: test/acc
    width: [lm.d_model]
"""
ARGS = ["suite=tinylm", "mechanisms=[multi_head]", "baseline=multi_head", "launcher=basic", "store=null"]
BENCH = ["bench.n=16", "bench.dim=16", "bench.heads=2"]
PLAN = "lm.layers=[{name:sliding_window,num_heads:2,window:4},{name:linear,num_heads:2}]"


@pytest.fixture(autouse=True)
def tiny_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "conf" / "suite").mkdir(parents=True)
    (tmp_path / "conf" / "suite" / "tinylm.yaml").write_text(SUITE)
    monkeypatch.setenv("ATTNX_CONFIG_PATH", str(tmp_path / "conf"))
    monkeypatch.chdir(tmp_path)


def test_a_plan_is_an_arm_labelled_by_its_layers(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert cli(["compare", *ARGS, *BENCH, PLAN, f"out={out}"]) == 0
    report = (out / "report.md").read_text()
    assert report.startswith("# attnx compare: sliding_window+linear against multi_head")
    assert "| sliding_window+linear |" in report and "| multi_head |" in report


def test_a_plan_with_a_mechanism_or_an_unnamed_layer_is_one_line_exit_2(
    capsys: pytest.CaptureFixture,
) -> None:
    for argv, expected in [
        ([PLAN, "attention=dot"], f"attnx compare: {PLAN}: a plan names each layer's mechanism and score"),
        (["lm.layers=[{window:2}]"], "attnx compare: lm.layers=[{window:2}]: a plan is a list of attention"),
    ]:
        capsys.readouterr()
        assert cli(["compare", *ARGS, *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith(expected) and err.count("\n") == 1, err
