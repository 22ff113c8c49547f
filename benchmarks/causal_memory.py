"""Benchmark 13: `multi_head` as causal self-attention, SDPA's own causal mask (`is_causal`, attnx now) vs
the explicit [B, 1, N, N] mask from `visible` that it handed SDPA before (rebuilt here: SDPA called on the
same projections with that mask), peak memory and time, forward (no_grad) and forward+backward.

    python benchmarks/causal_memory.py [--lengths 1024,2048,4096,8192] [--dim 64 --heads 4 --batch 1]

Memory is measured per point in a fresh child process: the peak resident set (VmHWM) of one call above
the resident set just before it, after resetting the peak (`/proc/self/clear_refs`) and after a warm-up
call at N = 64 (torch's lazily loaded kernels are not the call's). It counts everything the process
touches (tensors, the allocator's slack, kernel scratch); the tensor column is torch.profiler's replay of
tensor allocations in the same child (`attnx.bench.measure.peak_memory`), a cross-check. Times are medians
of interleaved rounds in this process (as many as fit in --budget seconds, 5 to 50, after a warm-up).
Goal at N = 8192: peak memory ≤ ¼ of the explicit mask's, time no worse.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import common
import torch
import torch.nn.functional as F

from attnx.bench.measure import interleaved, peak_memory, ratios
from attnx.nn.attention import visible
from attnx.nn.multihead import MultiHeadAttention, lower_triangular
from attnx.nn.positions import Positions

PATHS = ("explicit mask (before)", "is_causal (attnx)")
MODES = ("forward", "forward+backward")


def forwards(
    n: int, d: int, heads: int, batch: int
) -> tuple[list[torch.Tensor], dict[str, Callable[[], torch.Tensor]]]:
    """(what gets gradients, both paths' forwards) on one mechanism and input: its attend
    (need_weights=False), and what it ran before, SDPA with `visible`'s mask on the same projections (eval
    mode: no dropout)."""
    torch.manual_seed(0)
    att = MultiHeadAttention(d, d, d, num_heads=heads).eval()
    x = torch.randn(batch, n, d, requires_grad=True)
    mask = torch.ones(batch, n, dtype=torch.bool)
    at = Positions.self_attention(n, causal=True)

    def explicit() -> torch.Tensor:
        q = att._split(att.W_q(x))
        k, v = att.key_value_heads(x, x, mask)
        return att._merge(F.scaled_dot_product_attention(q, k, v, attn_mask=visible(mask[:, None, None], at)))

    def fused() -> torch.Tensor:
        return att(x, x, x, mask, need_weights=False, positions=at)[0]

    return [x, *att.parameters()], dict(zip(PATHS, (explicit, fused)))


def in_mode(forward: Callable[[], torch.Tensor], mode: str, leaves: list[torch.Tensor]) -> Callable[[], None]:
    """One call: the forward under no_grad, or forward+backward, its gradients then dropped (as zero_grad
    with set_to_none: the next call allocates them again)."""
    if mode == "forward":

        def run() -> None:
            with torch.no_grad():
                forward()

        return run

    def step() -> None:
        out = forward()
        out.backward(torch.ones_like(out))
        for leaf in leaves:
            leaf.grad = None

    return step


def _kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))


def child(path: str, mode: str, n: int, d: int, heads: int, batch: int) -> dict[str, float]:
    """Peak memory of one call (MiB) in this fresh process: resident set and torch's tensors."""
    torch.set_num_threads(1)
    leaves, small = forwards(64, d, heads, batch)
    in_mode(small[path], mode, leaves)()  # warm-up: load the kernels
    leaves, paths = forwards(n, d, heads, batch)
    fn = in_mode(paths[path], mode, leaves)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident set (VmHWM) restarts from the current one
    before = _kib("VmRSS")
    fn()
    rss = (_kib("VmHWM") - before) / 1024
    return {"rss": rss, "tensors": peak_memory(fn, torch.device("cpu")) / 2**20}


def measure_in_child(path: str, mode: str, n: int, args: argparse.Namespace) -> dict[str, float]:
    """`child` in a fresh process of this script (this checkout's attnx first on the path)."""
    command = [sys.executable, __file__, "--child", f"{PATHS.index(path)},{mode},{n}"]
    command += ["--dim", str(args.dim), "--heads", str(args.heads), "--batch", str(args.batch)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return json.loads(result.stdout.splitlines()[-1])


def check_cost(n: int, batch: int) -> float:
    """Median µs of `lower_triangular` (its host sync included), the fast path's only extra work."""
    mask, at = torch.ones(batch, 1, 1, n, dtype=torch.bool), Positions.self_attention(n, causal=True)
    times = interleaved({"check": lambda: lower_triangular(mask, at)}, torch.device("cpu"), 101, warmup=5)
    return statistics.median(times["check"]) * 1e6


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--lengths", default="1024,2048,4096,8192")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--child", help=argparse.SUPPRESS)  # PATH_INDEX,MODE,N: one memory point
    args = p.parse_args()
    if args.child:
        index, mode, n = args.child.split(",")
        print(json.dumps(child(PATHS[int(index)], mode, int(n), args.dim, args.heads, args.batch)))
        return
    device = common.start(args)
    assert device.type == "cpu", "this benchmark measures CPU memory"
    print(
        f"causal self-attention, d={args.dim}, heads={args.heads}, batch={args.batch}, float32, no padding\n"
    )
    rows = []
    for n in (int(v) for v in args.lengths.split(",")):
        leaves, paths = forwards(n, args.dim, args.heads, args.batch)
        with torch.no_grad():
            before, now = (f() for f in paths.values())
        torch.testing.assert_close(now, before, atol=1e-5, rtol=1e-5)
        check_us = check_cost(n, args.batch)
        for mode in MODES:
            memory = {path: measure_in_child(path, mode, n, args) for path in PATHS}
            fns = {path: in_mode(f, mode, leaves) for path, f in paths.items()}
            times = interleaved(fns, device, common.rounds(list(fns.values()), device, args.budget))
            ms = [statistics.median(times[path]) * 1e3 for path in PATHS]
            old, new = (memory[path] for path in PATHS)
            speed = ratios(times, PATHS[0])[PATHS[1]]
            rows.append(
                [n, mode, old["rss"], new["rss"], new["rss"] / old["rss"], old["tensors"], new["tensors"]]
                + [*ms, speed, check_us]
            )
            print(f"N={n} {mode}: done", file=sys.stderr)
    header = [
        "N",
        "pass",
        "RSS MiB before",
        "RSS MiB now",
        "now/before (≤ 0.25)",
        "tensors MiB before",
        "tensors MiB now",
        "ms before",
        "ms now",
        "speed now vs before (≥ 1.0)",
        "check µs",
    ]
    last = {row[1]: row for row in rows if row[0] == rows[-1][0]}  # the largest N, per pass
    values = {
        "n": rows[-1][0],
        **{f"memory_{m}": row[4] for m, row in zip(("fwd", "train"), last.values())},
        **{f"speed_{m}": row[9] for m, row in zip(("fwd", "train"), last.values())},
        "check_us_low": min(row[10] for row in rows),
        "check_us_high": max(row[10] for row in rows),
    }
    headline = {
        "what": f"`multi_head` causal self-attention at N = {values['n']}, peak memory and time vs the "
        "explicit mask",
        "goal": "≤ 0.25×, no slower",
        "measured": f"{values['memory_fwd']:.3f}× (forward), {values['memory_train']:.3f}× (fwd+bwd); "
        f"{values['speed_fwd']:.1f}× and {values['speed_train']:.1f}× faster",
        "verdict": common.verdict(
            max(row[4] for row in last.values()) <= 0.25 and min(row[9] for row in rows) >= 1.0
        ),
    }
    common.record(args, {"lengths": common.table(header, rows)}, values, [headline])


if __name__ == "__main__":
    main()
