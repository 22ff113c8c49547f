"""`attnx bench` on a tiny grid: its table, CSV and plots, its refusals, its causal and lm rows, and no
Lightning imported (never wall-clock assertions)."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from attnx.bench.cli import main
from attnx.bench.settings import budget


def test_bench_tiny_grid_writes_table_csv_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["--attention", "multi_head,dot,none", "--score", "scaled_dot,additive", "--encoder", "rnn"]
    argv += ["--lengths", "8,16", "--dim", "16", "--heads", "1,2", "--batch", "2"]
    argv += ["--repeats", "1", "--warmup", "0", "--out", str(tmp_path)]
    assert main(argv) == 0
    assert {"bench.csv", "time.png", "memory.png"} <= {p.name for p in tmp_path.iterdir()}
    rows = list(csv.DictReader((tmp_path / "bench.csv").open()))
    labels = {row["label"] for row in rows}
    assert labels == {
        "multi_head/scaled_dot d=16 h=1",
        "multi_head/scaled_dot d=16 h=2",
        "multi_head/additive d=16 h=1",
        "multi_head/additive d=16 h=2",
        "dot/scaled_dot d=16",
        "dot/additive d=16",
        "none d=16",
        "rnn encoder d=16",
    }
    assert len(rows) == 2 * len(labels)
    for row in rows:
        n, heads = int(row["n"]), row["heads"]
        if row["score"] == "scaled_dot":  # QKᵀ + weights·V is all a scaled dot product counts
            assert float(row["flop_ratio"]) == 1.0
            assert float(row["analytic_gflop"]) * 1e9 == 4 * n * n * 16 * 2
        if row["label"].startswith(
            "multi_head/scaled_dot"
        ):  # plus W_q, W_k, W_v, W_o: 4·2·N·d² each batch row
            assert float(row["gflop"]) * 1e9 == pytest.approx(4 * n * n * 16 * 2 + 4 * 2 * n * 16 * 16 * 2)
        if row["kind"] == "encoder":
            assert row["flop_ratio"] == "" and float(row["gflop"]) > 0 and heads == ""
        assert float(row["train_ms"]) > 0 and float(row["train_mib"]) > 0
        # bidirectional rows keep no decoding state, and say why
        why = {"rnn": "an encoder", "none": "no causal mask"}.get(row["name"], "not a causal row (--causal)")
        assert row["state_bytes"] == "" and row["state_why"] == why
    out = capsys.readouterr().out
    assert "ratio" in out and "time ~ N^k" in out and "— not a causal row (--causal)" in out


def test_bench_does_not_import_lightning(tmp_path: Path) -> None:
    argv = ["--attention", "dot", "--encoder", "", "--lengths", "8", "--repeats", "1", "--out", str(tmp_path)]
    code = (
        f"import sys, attnx.bench.cli as b; b.main({argv!r}); "
        "print([m for m in sys.modules if 'lightn' in m])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"


def test_bench_rejects_unknown_names_and_bad_grids(capsys: pytest.CaptureFixture) -> None:
    assert main(["--attention", "multihead"]) == 2
    assert "did you mean 'multi_head'" in capsys.readouterr().err
    assert main(["--attention", "multi_head", "--dim", "10", "--heads", "4"]) == 2
    assert "--heads must divide --dim" in capsys.readouterr().err
    assert main(["--attention", "", "--encoder", ""]) == 2


def test_bench_causal_rows_with_their_memory_budgets(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["--attention", "multi_head,linear,sliding_window", "--causal", "--encoder", ""]
    argv += ["--lengths", "8,16", "--dim", "16", "--heads", "2", "--batch", "2"]
    argv += ["--repeats", "1", "--warmup", "0", "--out", str(tmp_path)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    rows = list(csv.DictReader((tmp_path / "bench.csv").open()))
    assert {row["label"] for row in rows} == {
        "multi_head/scaled_dot d=16 h=2 causal",
        "linear d=16 h=2 causal",
        "sliding_window/scaled_dot d=16 h=2 causal",
    }
    for row in rows:
        n, growth = int(row["n"]), 2 if row["name"] == "multi_head" else 1
        assert row["causal"] == "True" and int(row["memory_growth"]) == growth
        assert float(row["budget_mib"]) * 2**20 == budget(growth, n, 16, 2, 2)
    assert "budget MiB" in captured.out and "| linear d=16 h=2 causal" in captured.out
    state = {(row["name"], int(row["n"])): int(row["state_bytes"]) for row in rows}
    assert state["multi_head", 8] == 2 * 8 * 16 * 4 and state["multi_head", 16] == 2 * 16 * 16 * 4  # K, V
    assert state["sliding_window", 16] == state["multi_head", 16]  # its window, 16, is all of N = 16
    assert state["linear", 16] == state["linear", 8] < state["multi_head", 8]  # the recurrent (S, z)


def test_bench_lm_rows_run_a_decoder_only_model_per_mechanism(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = ["--attention", "", "--encoder", "", "--lm", "multi_head,linear", "--lengths", "8,16"]
    argv += ["--dim", "16", "--heads", "2", "--batch", "2", "--repeats", "1", "--warmup", "0"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "bench.csv").open()))
    assert {row["label"] for row in rows} == {
        "lm (multi_head) d=16 h=2 causal",
        "lm (linear) d=16 h=2 causal",
    }
    assert all(row["kind"] == "lm" and float(row["gflop"]) > 0 for row in rows)
    # one block: its site's K/V cache, 2·N·d float32 numbers per sequence
    assert {int(row["state_bytes"]) for row in rows if row["name"] == "multi_head"} == {
        2 * 8 * 16 * 4,
        2 * 16 * 16 * 4,
    }
    assert main(["--attention", "", "--encoder", "", "--lm", "none"]) == 2
    assert "--lm none: none declares no causal mask" in capsys.readouterr().err
