"""`attnx report` and the compare report never hide a run: every run folder found is listed, with why it
was left out (no results.json, an unreadable one, a run that did not complete, metrics that are not finite
numbers); an invalid run is never ranked; bad options are one stderr line and exit 2."""

from __future__ import annotations

import csv
import html
import json
import math
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from attnx.cli import main as cli
from attnx.track.lock import RunLock
from attnx.track.results import write_results


def record(attention: str, exact: Any, seed: int = 0, length: int = 8) -> dict[str, Any]:
    """A completed run of `attention` whose test/exact_match is `exact` (any JSON value)."""
    return {
        "status": "completed",
        "overrides": [f"attention={attention}", f"task.max_len={length}", f"seed={seed}"],
        "choices": {"task": "reverse", "encoder": "rnn", "attention": attention, "score": None},
        "config": {"task": {"name": "reverse", "max_len": length}, "seed": seed},
        "model_type": "seq2seq",
        "metrics": {"test/exact_match": exact, "test/token_acc": 0.5, "val/exact_match": 0.5},
        "params": 1000,
        "train_seconds": 1.0,
    }


def run_folder(folder: Path, overrides: list[str]) -> Path:
    """What every attnx run writes as it starts, before its record: the lock and `.hydra/`."""
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (folder / "run.lock").write_text("")
    return folder


def good_sweep(folder: Path) -> Path:
    """Two seeds of additive (better) and dot, over two lengths: every table, test and figure has rows."""
    for i, (attention, seed, length) in enumerate(
        (a, s, n) for a in ("additive", "dot") for s in (0, 1) for n in (8, 16)
    ):
        write_results(
            folder / str(i),
            record(attention, (0.9 if attention == "additive" else 0.4) + seed / 100, seed, length),
        )
    return folder


def report(folder: Path, capsys: pytest.CaptureFixture, *options: str) -> tuple[str, str, str]:
    """(stdout, report.md, report.html's text) of a successful `attnx report`."""
    assert cli(["report", str(folder), *options]) == 0
    out = capsys.readouterr().out
    return out, (folder / "report.md").read_text(), html.unescape((folder / "report.html").read_text())


def test_every_run_folder_found_is_in_the_document_with_why_it_was_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    sweep = good_sweep(tmp_path / "multirun")
    truncated = run_folder(sweep / "8", ["attention=multi_head"])
    text = json.dumps(record("multi_head", 0.99), indent=2)[:300]  # a disk that filled up mid-write
    (truncated / "results.json").write_text(text)
    run_folder(sweep / "9", ["attention=fixed_c"])  # started, then its record was lost
    ended = {"failed": "RuntimeError: boom", "interrupted": "interrupted by SIGTERM", "running": None}
    for i, (state, error) in enumerate(ended.items(), start=10):
        write_results(
            sweep / str(i), record("dot", 0.99) | {"status": state, "error": error, "pid": 7, "host": "h"}
        )
    live = RunLock(sweep / "12").acquire()  # 12 runs on; 13 died without a word (kill -9)
    write_results(sweep / "13", record("dot", 0.99) | {"status": "running", "pid": 8, "host": "h"})
    try:
        out, md, page = report(sweep, capsys)
    finally:
        live.release()

    why = {
        8: f"results.json: ends at line {text.rstrip().count(chr(10)) + 1}, mid-record (truncated?)",
        9: "no results.json (the run stopped before writing it, or it was removed)",
        10: "RuntimeError: boom",
        11: "interrupted by SIGTERM",
        12: "still running: pid 7 on h holds its lock",
        13: "pid 8 on h ended without a record (killed?)",
    }
    status = {8: "unreadable", 9: "no record", 10: "failed", 11: "interrupted", 12: "running", 13: "stale"}
    said = "8/14 runs completed; 1 failed, 1 interrupted, 1 no record, 1 running, 1 stale, 1 unreadable"
    rows = {}
    for document in (out, md):
        assert said in document
        rows = {
            int(Path(line.split("|")[-2].strip()).name): line
            for line in document.splitlines()
            if "| /" in line
        }
        assert sorted(rows) == sorted(why)  # each run left out, in the printed summary and the document
        for i, line in rows.items():
            cells = [c.strip() for c in line.strip("| ").split("|")]
            assert cells[-3:] == [status[i], why[i], str(sweep / str(i))]
    assert rows[8].startswith("| multi_head ") and rows[9].startswith("| fixed_c ")  # from .hydra/
    assert said in page and all(
        f"<td>{status[i]}</td><td>{why[i]}</td><td>{sweep / str(i)}</td>" in page for i in why
    )
    assert "run folder holds results.json, .hydra/ or run.lock" in md  # what was searched for
    assert "Completed, in the tables and figures: 8 (`0`, `1`, `2`, `3`, `4`, `5`, `6`, `7`)" in md
    assert "Best test/exact_match: 0.9050 (attention=additive, task.max_len=8)" in md  # none of the 0.99s
    with (sweep / "report.csv").open() as handle:
        statuses = {int(Path(r["folders"]).name): r["status"] for r in csv.DictReader(handle)}
    assert {i: statuses[i] for i in why} == status


def test_folders_given_relative_absolute_or_as_one_run_are_named_from_their_common_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    good_sweep(tmp_path / "a")
    write_results(tmp_path / "b", record("dot", 0.5))
    monkeypatch.chdir(tmp_path / "a")
    assert cli(["report", ".", str(tmp_path / "b"), "--out", ".."]) == 0  # one relative, one absolute
    md = (tmp_path / "report.md").read_text()
    assert f"9 run folders under `{tmp_path}`" in md and "`a/0`" in md and "`b`" in md
    monkeypatch.chdir(tmp_path / "b")
    assert cli(["report", "."]) == 0
    assert f"1 run folder under `{tmp_path}` (" in (tmp_path / "b" / "report.md").read_text()


def test_a_folder_without_run_folders_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    assert cli(["report", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no run folder" in err[0] and str(tmp_path / "empty") in err[0]


BAD_METRICS = {
    "nan": (math.nan, "test/exact_match is NaN"),
    "inf": (math.inf, "test/exact_match is Infinity"),
    "-inf": (-math.inf, "test/exact_match is -Infinity"),
    "string": ("0.99", 'test/exact_match is "0.99" (a string, not a number)'),
    "list": ([0.99], "test/exact_match is [0.99] (a list, not a number)"),
    "bool": (True, "test/exact_match is true (a boolean, not a number)"),
}


def invalid(folder: Path, case: str) -> dict[str, Any]:
    """A completed record of multi_head, the would-be best, made invalid by `case`."""
    run = record("multi_head", 0.99)
    if case == "no metrics":
        del run["metrics"]
    elif case == "metrics list":
        run["metrics"] = [0.99]
    elif case == "cost":
        run["params"] = "1k"
    elif case == "config":
        run["config"] = [1]
    elif case == "overrides":
        run["overrides"] = ["attention=multi_head", "task.max_len=[8"]
    else:
        run["metrics"]["test/exact_match"] = BAD_METRICS[case][0]
    write_results(folder, run)
    return run


REASONS = {
    **{case: reason for case, (_, reason) in BAD_METRICS.items()},
    "no metrics": "no metrics",
    "metrics list": "metrics is a list, not a mapping",
    "cost": 'params is "1k" (a string, not a number)',
    "config": "config is a list, not a mapping",
    "overrides": "overrides do not parse: ",
}


@pytest.mark.parametrize("case", list(REASONS))
def test_a_run_whose_metrics_are_not_finite_numbers_is_invalid_and_never_ranked(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    sweep = good_sweep(tmp_path / "multirun")
    bad = sweep / "8"
    invalid(bad, case)
    out, md, page = report(sweep, capsys, "--baseline", "attention=dot")

    assert "8/9 runs completed; 1 invalid" in out and "8/9 runs completed; 1 invalid" in md
    assert "Best test/exact_match: 0.9050 (attention=additive, task.max_len=8)" in md
    listed = next(line for line in md.splitlines() if f"| {bad} " in line)
    status, why, folder = [c.strip() for c in listed.strip("| ").split("|")][-3:]
    assert (status, folder) == ("invalid", str(bad)) and why.startswith(REASONS[case])
    assert f"<td>invalid</td><td>{why}</td><td>{bad}</td>" in page
    ranked = md.split("## Run folders")[0]  # results, statistics, costs, figures
    assert "multi_head" not in ranked and "nan" not in ranked.lower()
    with (sweep / "report.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["status"] for r in rows if r["folders"] == str(bad)] == ["invalid"]
    assert all(math.isfinite(float(r["test/exact_match"])) for r in rows if r["status"] == "completed")


def test_a_sweep_whose_every_run_is_invalid_is_reported_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    for i, case in enumerate(("nan", "string")):
        invalid(tmp_path / str(i), case)
    out, md, _ = report(tmp_path, capsys)
    assert "0/2 runs completed; 2 invalid" in out and "Best" not in md


@pytest.mark.parametrize(
    "options, says",
    [
        (
            ["--panel", "task.seq_len"],
            "--panel task.seq_len is not a swept key; swept: attention, task.max_len",
        ),
        (["--panel", "task.max_len,atention"], "--panel atention is not a swept key"),
        (["--select", "optim.lr"], "--select optim.lr is not a swept key; swept: attention, task.max_len"),
        (["--select", "task.max_len", "--by", "val/acc"], "--by val/acc: no completed run has it; metrics: "),
        (
            ["--select", "task.max_len", "--metric", "test/token_acc"],
            "--by val/token_acc: no completed run has it",
        ),
    ],
)
def test_unknown_keys_in_options_are_one_line_and_exit_2(
    options: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    sweep = good_sweep(tmp_path / "multirun")
    assert cli(["report", str(sweep), *options, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"attnx report: {says}"), err
    assert not (tmp_path / "out").exists()  # refused before anything is written


@pytest.mark.parametrize("where", ["file", "under a file"])
def test_an_out_that_is_a_file_is_one_line_and_exit_2(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    sweep = good_sweep(tmp_path / "multirun")
    (tmp_path / "notes.txt").write_text("mine")
    out = tmp_path / "notes.txt" / ("" if where == "file" else "report")
    assert cli(["report", str(sweep), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"attnx report: --out {out}: {tmp_path / 'notes.txt'} is a file, not a folder"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_the_compare_report_lists_lost_and_invalid_runs_and_never_ranks_them(tmp_path: Path) -> None:
    from attnx.compare.plan import Arm, Job
    from attnx.compare.report import CompareStudy, write_report

    arms = {label: Arm(label, (f"attention={label}",)) for label in ("additive", "dot", "local_window")}
    jobs = [Job("reverse", arm, seed) for arm in arms.values() for seed in (0, 1)]
    for i, job in enumerate(jobs):
        run = record(job.arm.label, 0.5 + i / 100, job.seed)
        if job.arm.label == "local_window":
            run["metrics"]["test/exact_match"] = math.nan if job.seed == 0 else "high"
        write_results(tmp_path / "runs" / str(i), run)
    (tmp_path / "runs" / "1" / "results.json").unlink()  # additive's seed 1: its record lost
    cfg = OmegaConf.create(
        {
            "tasks": {"reverse": {"metric": "test/exact_match", "overrides": ["task=reverse"]}},
            "seeds": [0, 1],
            "mechanisms": ["additive", "dot"],
            "baseline": "additive",
            "bench": {"n": 16},
            "protocol": {"lr_search": False, "match_params": False},
        }
    )
    study = CompareStudy(tmp_path, cfg, "tiny", arms["local_window"], jobs, [], {}, {}, {}, ["attnx compare"])
    write_report(study)
    md = (tmp_path / "report.md").read_text()
    assert "3/6 runs completed" in md
    ranking = "\n".join(line for line in md.split("## Ranking")[1].split("##")[0].splitlines() if "|" in line)
    assert "local_window" not in ranking and "nan" not in ranking.lower()
    assert "| additive " in ranking and "| dot " in ranking
    left_out = md.split("## Run folders")[1]
    assert "test/exact_match is NaN" in left_out
    assert 'test/exact_match is "high" (a string, not a number)' in left_out
    assert f"{tmp_path / 'runs' / '1'}" in left_out and "no results.json" in left_out
