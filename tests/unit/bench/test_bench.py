"""What `attnx bench` selects and measures, and the measuring tools under it (never wall-clock assertions);
the command run on a tiny grid: tests/e2e/bench/test_bench_cli.py."""

import pytest
import torch
import torch.nn.functional as F

from attnx import registry
from attnx.bench.cli import budget_table, parser, settings
from attnx.bench.measure import count_flops, interleaved, peak_memory, ratios
from attnx.bench.points import Point, decoding_state, growth_exponent
from attnx.bench.settings import Setting, budget, module_for
from attnx.nn.attention import Attention
from attnx.nn.classic import LuongAttention
from attnx.nn.multihead import MultiHeadAttention

CPU = torch.device("cpu")


def test_bench_causal_over_all_says_once_which_it_leaves_out(
    capsys: pytest.CaptureFixture,
) -> None:
    selected = settings(parser().parse_args(["--causal", "--encoder", ""]))
    acausal = [n for n in registry.available("attention") if not registry.get("attention", n).causal]
    assert acausal and {s.name for s in selected} == set(registry.available("attention")) - set(acausal)
    assert capsys.readouterr().err.splitlines() == [
        f"attnx bench: --causal leaves out {', '.join(acausal)}: no causal mask"
    ]


def test_memory_budget_is_linear_or_adds_the_n_squared_figure() -> None:
    assert budget(1, 1024, 64, 4, 2) == 32 * 1024 * 64 * 2 * 4  # float32 numbers per token and channel
    assert budget(2, 1024, 64, 4, 2) == budget(1, 1024, 64, 4, 2) + 4 * 1024**2 * 4 * 2 * 4
    assert budget(2, 1024, 64, None, 2) == budget(1, 1024, 64, None, 2) + 4 * 1024**2 * 2 * 4


class Undeclared(MultiHeadAttention):
    state_size = Attention.state_size


def test_decoding_state_is_the_declared_cache_in_bytes_or_says_why_not() -> None:
    causal = Setting("attention", "multi_head", None, 16, 2, causal=True)
    heads = MultiHeadAttention(16, 16, 16, num_heads=2)
    assert decoding_state(causal, heads, 10) == (2 * 10 * 16 * 4, "")  # K and V, float32
    assert decoding_state(causal, heads.double(), 10) == (2 * 10 * 16 * 8, "")
    assert decoding_state(causal, Undeclared(16, 16, 16), 10) == (None, "Undeclared.state_size undeclared")
    # softmax attention re-prepares: its site keeps the N·d inputs beside the masked values
    dot = Setting("attention", "dot", None, 16, None, causal=True)
    assert decoding_state(dot, LuongAttention(16, 16, 16), 10) == (2 * 10 * 16 * 4, "")
    bidirectional = Setting("attention", "multi_head", None, 16, 2)
    assert decoding_state(bidirectional, heads, 10) == (None, "not a causal row (--causal)")


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


def test_an_lm_row_of_a_plan_builds_a_block_per_mechanism_and_sums_their_state() -> None:
    registry.load_all()  # sliding_window and linear are shipped plugins
    args = parser().parse_args(["--attention", "", "--encoder", "", "--lm", "sliding_window+linear,linear"])
    rows = [s for s in settings(args) if s.dim == 64]
    assert [(s.name, s.heads) for s in rows] == [("sliding_window+linear", 4), ("linear", 4)]
    planned, linear = (module_for(s, 64) for s in rows)
    kinds = [type(b.attention.mechanism).__name__ for b in planned.blocks]  # type: ignore[union-attr]
    assert kinds == ["SlidingWindowAttention", "LinearAttention"]
    window = module_for(Setting("lm", "sliding_window", None, 64, 4, causal=True), 64)
    size = decoding_state(rows[0], planned, 40)[0]
    assert size == decoding_state(rows[1], linear, 40)[0] + decoding_state(rows[1], window, 40)[0]  # type: ignore[operator]
    with pytest.raises(ValueError, match="--lm linear\\+local_window: local_window declares no causal mask"):
        settings(parser().parse_args(["--attention", "", "--encoder", "", "--lm", "linear+local_window"]))
