"""The metrics `attnx report` shows by default: each model type's declared `report` metrics with their twins
on the runs' test slices, and for a model type this process has not registered (a plugin's, which a
report never imports) the metric its records' convergence judged; and each metric's direction, from its
declaration."""

from __future__ import annotations

from attnx.registry import Metric
from attnx.report.runs import declared, default_metrics, higher_is_better, undeclared


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


def test_a_metric_s_direction_is_its_declaration_never_its_name() -> None:
    """A record's `metric_declarations` decide; an older record falls back on its model type's; a metric
    neither declares is taken as higher-is-better, and `undeclared` names it for the report to say so.
    (The name once decided: "answer" contains "wer".)"""
    declared_here = record("qa", ["test/answer"]) | {
        "metric_declarations": {"test/answer": {"higher_is_better": False, "ceiling": 0.0}}
    }
    found = declared([declared_here], "test/answer")
    assert found is not None and not found.higher_is_better and found.ceiling == 0.0
    assert higher_is_better([record("qa", ["test/answer"])], "test/answer")  # undeclared: taken as rising
    old = {"task_kind": "seq2seq", "metrics": {"test/perplexity": 3.0, "test/exact_match": 0.5}}
    assert not higher_is_better([old], "test/perplexity") and higher_is_better([old], "test/exact_match")
    assert declared([old], "test@2x/exact_match") == Metric("exact_match", True, 1.0, proportion=True)
    assert undeclared([old, declared_here], ["test/exact_match", "test/answer", "test/bleu"]) == ["test/bleu"]
