"""Benchmark 15: decoding one token after t, time and state per step, for t = 64 … 8192.

A causal self-attention site (`AttentionSite`, as a decoder's or an lm's block hosts it) is prefilled with t
random tokens (`AttentionSite.cache` over all of them at once, then one decoding step, which turns a
recurrent mechanism's keys into its state), after which single-token steps from that cache are timed
(median, each mechanism alone): `cache` appends the token, the site attends with it (Tq = 1, no weights).
The state is what the cache holds after a step, per sequence: its floating tensors, each storage once and
whole (`attnx.nn.attention.stored`), next to what the mechanism declares (`KVCache.state_size`). The slopes
of log time and log state against log t (least squares over the grid) say how a step grows: softmax's K/V
cache as t, linear attention's recurrent state (S, z) and a sliding window's last w keys not at all
(Katharopoulos et al. 2020, "Transformers are RNNs"; MAD's and Zoology's state axis).

    python benchmarks/decode.py [--lengths 64,128,...,8192 --dim 64 --heads 4 --batch 1 --steps 50]

Goal: slopes ≤ 0.1 (flat) for linear, sliding_window and based (when registered), in time and state;
multi_head's growing.
"""

from __future__ import annotations

import math
import statistics

import common
import torch

from attnx import registry
from attnx.bench.measure import median_time
from attnx.nn.attention import Mechanism, stored
from attnx.nn.positions import Positions
from attnx.nn.transformer import AttentionSite, KVCache

MECHANISMS = ("multi_head", "linear", "sliding_window", "based")  # based: when a plugin registers it
FLAT = ("linear", "sliding_window", "based")  # the goal's flat rows
LENGTHS = [64 * 2**i for i in range(8)]  # 64 … 8192


def site(name: str, dim: int, heads: int, device: torch.device) -> AttentionSite:
    """`name` at a causal site of width `dim`, with `heads` heads when it takes them."""
    cls = registry.get("attention", name)  # loads the plugins first
    hyper = (
        {"num_heads": heads}
        if "num_heads" in registry.registry("attention").entry(name).hyperparams()
        else {}
    )
    mechanism = Mechanism(cls, None, hyper)
    return AttentionSite(mechanism, dim, "causal").to(device).eval()


def token_step(at: AttentionSite, cache: KVCache, token: torch.Tensor, t: int) -> KVCache:
    """The token after t others: appended to the cache, then attended with (the site's output is what a
    decoder uses; discarded here)."""
    mask = torch.ones(token.shape[:2], dtype=torch.bool, device=token.device)
    cache = at.cache(token, mask, cache)
    positions = Positions(Positions.span(1, token.device, t), Positions.span(t + 1, token.device), True)
    at(token, cache.prepared, positions, False)
    return cache


def measured(sites: dict[str, AttentionSite], t: int, args, device: torch.device) -> dict[str, tuple]:
    """Per mechanism after t prefilled tokens: (median ms per step, state bytes held per sequence, and
    declared)."""
    x = torch.randn(args.batch, t + 2, args.dim, device=device)
    caches, steps = {}, {}
    for name, at in sites.items():
        full = torch.ones(args.batch, t, dtype=torch.bool, device=device)
        caches[name] = token_step(at, at.cache(x[:, :t], full, None), x[:, t : t + 1].clone(), t)
        steps[name] = lambda at=at, cache=caches[name]: token_step(at, cache, x[:, t + 1 :].clone(), t + 1)
    out = {}
    for name, at in sites.items():
        # each alone, not interleaved: softmax's megabyte-sized cache copies would evict the others' from
        # the CPU caches, and the slopes compare a mechanism with itself at other t, not with the others
        ms = median_time(steps[name], device, args.steps, warmup=2) * 1e3
        cache = steps[name]()  # t + 2 tokens
        size = x.element_size()
        held = stored((cache.inputs, cache.prepared)) * size // args.batch
        declared = KVCache.state_size(at.mechanism, t + 2)
        out[name] = ms, held, None if declared is None else declared * size
    return out


def slope(lengths: list[int], values: list[float]) -> float:
    """Least-squares slope of log(value) against log(t)."""
    return statistics.linear_regression([math.log(t) for t in lengths], [math.log(v) for v in values]).slope


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--lengths", type=lambda s: [int(v) for v in s.split(",")], default=LENGTHS)
    p.add_argument("--dim", type=int, default=64, help="d_model")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=50, help="timed steps per mechanism and t (median)")
    args = p.parse_args()
    device = common.start(args)
    names = [name for name in MECHANISMS if name in registry.available("attention")]
    sites = {name: site(name, args.dim, args.heads, device) for name in names}
    rows, series, unlike = [], {name: ([], []) for name in names}, []
    with torch.no_grad():
        for t in args.lengths:
            row: list[object] = [t]
            for name, (ms, held, declared) in measured(sites, t, args, device).items():
                row += [ms, held]
                series[name][0].append(ms)
                series[name][1].append(held)
                if held != declared:
                    unlike.append(f"{name} at t={t}: holds {held} bytes, declares {declared}")
            rows.append(row)
    header = ["t", *(f"{name} {what}" for name in names for what in ("ms", "state B"))]
    print("\n".join(unlike) or "every cache holds what its mechanism declares (KVCache.state_size)")
    summary, values = [], {"held_as_declared": not unlike}
    for name, (ms, held) in series.items():
        k_time, k_state = slope(args.lengths, ms), slope(args.lengths, held)
        goal = "≤ 0.1" if name in FLAT else "> 0.1"
        met = (max(k_time, k_state) <= 0.1) if name in FLAT else (min(k_time, k_state) > 0.1)
        summary.append([name, k_time, k_state, goal, common.verdict(met)])
        at = {f"t{t}": v for t, v in zip(args.lengths, ms)}  # "t2048": str.format reads digits as an index
        values[name] = {"time": k_time, "state": k_state, "ms": at}
    flat = [row for row in summary if row[0] in FLAT]
    grows = [row for row in summary if row[0] not in FLAT]
    headline = {
        "what": f"decoding one token after t = {args.lengths[0]} … {args.lengths[-1]} tokens: slopes of log "
        "time and log state against log t",
        "goal": "≤ 0.1 for " + ", ".join(row[0] for row in flat) + "; growing for multi_head",
        "measured": "; ".join(f"{row[0]} {row[1]:.2f} / {row[2]:.2f}" for row in [*flat, *grows]),
        "verdict": common.verdict(all(row[-1] == "met" for row in summary)),
    }
    tables = {
        "steps": common.table(header, rows, right_from=0),
        "slopes": common.table(["mechanism", "time ~ t^k", "state ~ t^k", "goal", ""], summary, right_from=1),
    }
    common.record(args, tables, values, [headline])


if __name__ == "__main__":
    main()
