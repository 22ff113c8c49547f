"""The metrics `attnx report` shows by default: each model type's declared `report` metrics with their twins
on the runs' test slices, and for a model type this process has not registered (a plugin's, which a
report never imports) the metric its records' convergence judged."""

from __future__ import annotations

from attnx.report.runs import default_metrics


def record(model_type: str, metrics: list[str], judged: str = "val/acc") -> dict:
    found = dict.fromkeys(metrics, 0.5)
    return {"model_type": model_type, "metrics": found, "convergence": {"metric": judged}}


def test_a_built_in_model_type_shows_its_declared_metrics_and_their_slices() -> None:
    runs = [record("seq2seq", ["test/exact_match", "test@2x/exact_match", "test/token_acc"])]
    assert default_metrics(runs) == ["test/exact_match", "test@2x/exact_match", "test/token_acc"]
    lm = [record("lm", ["test/acc", "test/exact_match"]), record("classification", ["test/acc", "test/f1"])]
    assert default_metrics(lm) == ["test/acc", "test/exact_match", "test/acc", "test/f1"]


def test_a_run_without_test_metrics_shows_validation() -> None:
    assert default_metrics([record("classification", ["val/acc", "val/f1"])]) == ["val/acc", "val/f1"]


def test_an_unregistered_model_type_shows_what_its_runs_were_judged_by() -> None:
    runs = [record("tagging", ["test/acc", "test/loss"]), record("tagging", ["test/acc"], judged="val/acc")]
    assert default_metrics(runs) == ["test/acc"]
    assert default_metrics([{"model_type": "mystery", "metrics": {}}]) == ["val/loss"]
