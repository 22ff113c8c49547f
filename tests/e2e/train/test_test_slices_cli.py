"""`task.test_slices` through the real CLI: a metric per slice in results.json, by_length over every slice."""

from __future__ import annotations

from pathlib import Path

from attnx import registry
from attnx.lit import lit_module
from attnx.train.assemble import model_spec

from helpers.runs import resolved
from helpers.tiny import ONE_EPOCH, TINY, TINY_LM, completed, sizes

SLICED = ["task=reverse", "task.min_len=3", "task.max_len=6", "task.test_slices=[2,4]"]


def test_a_seq2seq_run_reports_each_slice_and_its_lengths(tmp_path: Path) -> None:
    record = completed(tmp_path, *SLICED, *TINY)
    metrics = record["metrics"]
    assert {"test/exact_match", "test@2x/exact_match", "test@4x/exact_match"} <= set(metrics)
    assert not any("dataloader_idx" in name for name in metrics)
    lengths = [int(n) for n in record["by_length"]["test/exact_match"]]
    assert min(lengths) <= 6 and 18 < max(lengths) <= 24  # in distribution up to the 4x band (13-24)
    assert sum(record["by_length"]["examples"].values()) == 3 * 16  # test and both slices


def test_an_lm_run_reports_its_slice(tmp_path: Path) -> None:
    record = completed(tmp_path, *TINY_LM, "task.test_slices=[2]", "lm.max_len=32", *ONE_EPOCH, *sizes())
    assert {"test/acc", "test@2x/acc", "test@2x/exact_match"} <= set(record["metrics"])


def test_logged_test_metrics_list_each_slice() -> None:
    """The names a run declares (what configuration checks read) are the names its module logs."""
    run = resolved([*SLICED, *TINY])
    task = registry.build("task", run["task"])
    task.setup()
    logged = lit_module(model_spec(run.model_type, run.sections, task)).logged_metrics("test")
    assert {"test/exact_match", "test@2x/exact_match", "test@4x/token_acc"} <= set(logged)
    assert not any(name.startswith("val/") for name in logged)
    assert run.logged("test") == logged
