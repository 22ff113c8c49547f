"""compare's bench phase takes each arm's inference time as a value from `attnx.bench.points`, never by
reading a CSV back; the one `slug` names compare's folders and the report's figures alike."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from attnx import registry
from attnx.bench import points
from attnx.compare.phases import inference_ms
from attnx.compare.plan import Arm
from attnx.report.document import slug


def test_the_bench_phase_takes_its_timings_from_the_bench_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry.load_all()  # as `attnx compare` does before its phases
    measured: list[points.Point] = []
    measure_all, timing = points.measure_all, points.Timing(batch=1, repeats=1, warmup=0)

    def spy(*args: object, **kwargs: object) -> dict[str, list[points.Point]]:
        found = measure_all(*args, **kwargs)
        measured.extend(p for series in found.values() for p in series)
        return found

    monkeypatch.setattr("attnx.bench.points.measure_all", spy)
    monkeypatch.setattr("attnx.bench.cli.write_csv", lambda path, found: None)  # nothing to read back
    monkeypatch.setattr("attnx.bench.points.Timing", lambda: timing)
    cfg = OmegaConf.create({"bench": {"n": 8, "dim": 16, "heads": 2}})
    arms = [
        Arm("multi_head", ("attention=multi_head",)),
        Arm("dot+additive", ("attention=dot", "score=additive")),
        Arm("sliding_window+linear", ("lm.layers=[{name:sliding_window},{name:linear}]",)),
    ]
    times = inference_ms(tmp_path, cfg, arms)
    assert [p.label for p in measured] == [
        "multi_head/scaled_dot d=16 h=2",
        "dot/additive d=16",
        "sliding_window/scaled_dot d=16 h=2",  # a plan's layers, each as one mechanism's arm is timed
        "linear d=16 h=2",
    ]
    assert [p.n for p in measured] == [8] * 4
    plan = (measured[2].fwd_ms + measured[3].fwd_ms) / 2  # one of its layers, on average
    assert times == {
        "multi_head": measured[0].fwd_ms,
        "dot+additive": measured[1].fwd_ms,
        "sliding_window+linear": plan,
    }
    assert not list(tmp_path.rglob("*.csv"))


def test_one_slug_for_compare_folders_and_report_figures() -> None:
    assert slug("dot+my_score") == "dot+my_score"  # a score inside its host, as compare names its folder
    assert slug("task=reverse") == "task_reverse"  # pareto_task_reverse.png
    assert slug("test/exact_match") == "test_exact_match"
    assert slug(" a  b/ ") == "a_b"
