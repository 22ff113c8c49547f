"""`attnx bench` on a tiny grid, and the measuring tools under it (never wall-clock assertions)."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from attnx import registry
from attnx.bench.cli import Point, budget, budget_table, cases, growth_exponent, main, parser
from attnx.bench.measure import count_flops, interleaved, peak_memory, ratios

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
    code = (
        f"import sys, attnx.bench.cli as b; b.main({argv!r}); "
        "print([m for m in sys.modules if 'lightn' in m])"
    )
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


def test_bench_causal_over_all_says_once_which_it_leaves_out(
    capsys: pytest.CaptureFixture,
) -> None:
    selected = cases(parser().parse_args(["--causal", "--encoder", ""]))
    acausal = [n for n in registry.available("attention") if not registry.get("attention", n).causal]
    assert acausal and {case.name for case in selected} == set(registry.available("attention")) - set(acausal)
    assert capsys.readouterr().err.splitlines() == [
        f"attnx bench: --causal leaves out {', '.join(acausal)}: no causal mask"
    ]


@pytest.mark.e2e
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


@pytest.mark.e2e
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
    assert main(["--attention", "", "--encoder", "", "--lm", "none"]) == 2
    assert "--lm none: it declares no causal mask" in capsys.readouterr().err


def test_memory_budget_is_linear_or_adds_the_n_squared_figure() -> None:
    assert budget(1, 1024, 64, 4, 2) == 32 * 1024 * 64 * 2 * 4  # float32 numbers per token and channel
    assert budget(2, 1024, 64, 4, 2) == budget(1, 1024, 64, 4, 2) + 4 * 1024**2 * 4 * 2 * 4
    assert budget(2, 1024, 64, None, 2) == budget(1, 1024, 64, None, 2) + 4 * 1024**2 * 2 * 4


def point(n: int, ms: float, train_mib: float = 1.0, budget_mib: float = 2.0) -> Point:
    """A point of a linear-memory row: `ms` in both time columns, `train_mib` its fwd+bwd peak."""
    return Point(
        label="row",
        kind="attention",
        name="linear",
        score=None,
        dim=16,
        heads=2,
        causal=True,
        n=n,
        batch=1,
        threads=1,
        device="cpu",
        fwd_ms=ms,
        train_ms=ms,
        fwd_mib=train_mib,
        train_mib=train_mib,
        gflop=0.0,
        attn_gflop=None,
        analytic_gflop=None,
        flop_ratio=None,
        memory_growth=1,
        budget_mib=budget_mib,
    )


def test_budget_table_flags_a_row_over_its_budget_at_its_largest_n() -> None:
    within = [point(8, 1.0, train_mib=5.0), point(16, 1.0)]  # only the largest N is judged
    over = [point(8, 1.0), point(16, 1.0, train_mib=3.0)]
    text = budget_table({"within": within, "over": over})
    lines = {line.split("|")[1].strip(): line for line in text.splitlines()[2:]}
    assert lines["within"].rstrip(" |").endswith("yes")
    assert "OVER BUDGET" in lines["over"] and "32·N·d·batch" in lines["over"]


def test_growth_exponent_fits_the_upper_half_of_the_grid() -> None:
    grid = [64, 128, 256, 512, 1024, 2048]
    noisy_start = {64: 50.0, 128: 50.0}  # fixed per-call costs at small N, which the fit leaves out
    linear = [point(n, noisy_start.get(n, n / 10)) for n in grid]
    quadratic = [point(n, n * n / 1e4) for n in grid]
    assert growth_exponent(linear, "train_ms") == pytest.approx(1.0)
    assert growth_exponent(quadratic, "fwd_ms") == pytest.approx(2.0)
    assert growth_exponent(linear[:1], "train_ms") is None


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
