"""A run shorter than one epoch (`trainer.max_steps` under an epoch: how people smoke-test a config) never
validates while it trains; it must still complete, with test metrics (issue 29: every such run failed in
`callbacks.stop_at`'s EarlyStopping). tests/e2e/install/test_readme_commands.py runs every README line
this way."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from attnx.cli import main as cli

from helpers.tiny import TINY_MODEL, TINY_RNN, results, sizes, train

# 48 examples in batches of 16: an epoch is 3 steps, and the run stops after 2
SHORT = [*TINY_RNN, *TINY_MODEL, *sizes(), "trainer.max_steps=2"]


def test_a_run_shorter_than_one_epoch_is_tested_on_its_last_checkpoint_with_heatmaps(tmp_path: Path) -> None:
    """No validation chose a best checkpoint: the last one is validated and tested, named in the record;
    the heatmaps are drawn at test end and the report reads the run."""
    train(tmp_path, *SHORT, "callbacks.attention_heatmaps.num_examples=1")
    (record,) = results(tmp_path)
    assert record["status"] == "completed", record.get("error")
    assert record["steps"] == 2
    assert record["checkpoint"] == str(tmp_path / "checkpoints" / "last.ckpt")
    assert {"val/exact_match", "test/exact_match", "test/loss"} <= set(record["metrics"])
    assert list((tmp_path / "attention_maps" / "test").glob("*.png"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli(["report", str(tmp_path)]) == 0
    assert "1/1 runs completed" in out.getvalue()


def test_a_threshold_not_reached_before_the_run_ends_changes_nothing(tmp_path: Path) -> None:
    monitor = ["callbacks.model_checkpoint.monitor=val/exact_match", "callbacks.model_checkpoint.mode=max"]
    train(tmp_path, *SHORT, *monitor, "callbacks.stop_at.stopping_threshold=0.98")
    (record,) = results(tmp_path)
    assert record["status"] == "completed" and record["steps"] == 2, record.get("error")


def test_a_monitor_the_task_never_logs_is_one_line_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stop_at = ["callbacks.stop_at.monitor=val/acc", "callbacks.stop_at.stopping_threshold=0.9"]
    code = train(tmp_path, *SHORT, *stop_at)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("attnx train: callbacks.stop_at.monitor=val/acc: task reverse logs")
    assert "val/exact_match" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "checkpoints").exists()  # nothing trained
