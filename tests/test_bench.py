"""`attnx bench` on a tiny grid, and the measuring tools under it (never wall-clock assertions)."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from attnx.bench import main
from attnx.measure import count_flops, interleaved, peak_memory, ratios

CPU = torch.device("cpu")


@pytest.mark.e2e
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
    out = capsys.readouterr().out
    assert "ratio" in out and "time ~ N^k" in out


@pytest.mark.e2e
def test_bench_does_not_import_lightning(tmp_path: Path) -> None:
    argv = ["--attention", "dot", "--encoder", "", "--lengths", "8", "--repeats", "1", "--out", str(tmp_path)]
    code = f"import sys, attnx.bench as b; b.main({argv!r}); print([m for m in sys.modules if 'lightn' in m])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"


@pytest.mark.e2e
def test_bench_rejects_unknown_names_and_bad_grids(capsys: pytest.CaptureFixture) -> None:
    assert main(["--attention", "multihead"]) == 2
    assert "did you mean 'multi_head'" in capsys.readouterr().err
    assert main(["--attention", "multi_head", "--dim", "10", "--heads", "4"]) == 2
    assert "--heads must divide --dim" in capsys.readouterr().err
    assert main(["--attention", "", "--encoder", ""]) == 2


def test_sdpa_flops_are_counted_on_cpu() -> None:
    """FlopCounterMode alone counts 0 for the fused CPU kernel, forward and backward."""
    q, k, v = (torch.randn(2, 3, 10, 8, requires_grad=True) for _ in range(3))
    forward = count_flops(lambda: F.scaled_dot_product_attention(q, k, v))
    assert forward["Global"] == 4 * 10 * 10 * 8 * 2 * 3
    both = count_flops(lambda: F.scaled_dot_product_attention(q, k, v).sum().backward())
    assert both["Global"] == 3.5 * forward["Global"]  # backward: 5 products of the forward's 2


def test_peak_memory_sees_torch_allocations_on_cpu() -> None:
    def allocate() -> None:
        a = torch.ones(1024, 1024)  # 4 MiB
        b = a * 2  # 4 MiB more while a lives
        del a, b
        torch.ones(1024, 1024)  # 4 MiB again: the peak stays at 8

    assert 8 * 2**20 <= peak_memory(allocate, CPU) < 8 * 2**20 + 1024  # + a few bytes for scalars
    assert peak_memory(lambda: None, CPU) == 0


def test_interleaved_rounds_and_ratios() -> None:
    calls: list[str] = []
    times = interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, CPU, 3, 1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up, then the order rotates
    assert [len(t) for t in times.values()] == [3, 3]
    assert ratios({"ref": [2.0, 4.0, 6.0], "x": [1.0, 4.0, 2.0]}, "ref") == {"ref": 1.0, "x": 2.0}
