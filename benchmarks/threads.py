"""Threads: samples/s of small GRU training runs with 1 vs 2 torch CPU threads (train.yaml: `threads`).

Two copies of the same model (built as `attnx train` builds it) take training steps in turn, one with
each thread count (`torch.set_num_threads` switched between steps), on the same fixed batches, so
both see the same load from other processes.

    python benchmarks/threads.py [--counts 1,2]
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable

import common
import torch

from attnx.bench.measure import interleaved, ratios

RUNS = {
    "reverse, rnn (GRU) + additive: the default run": [],
    "reverse, small GRU (64) + none": ["attention=none", "encoder.hidden_dim=64", "decoder.hidden_dim=64"],
}
BATCHES = 4


def with_threads(count: int, step: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        torch.set_num_threads(count)
        return step()

    return run


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--counts", default="1,2", help="thread counts to compare; the first is the reference")
    args = p.parse_args()
    device = common.start(args)
    counts = [int(c) for c in args.counts.split(",")]
    rows = []
    for name, overrides in RUNS.items():
        steps = {}
        with tempfile.TemporaryDirectory() as out:
            for count in counts:
                task, module, trainer = common.assemble(overrides, out)
                loop = common.PlainLoop(task, module, trainer.gradient_clip_val, 10**6, device)
                steps[count] = with_threads(count, common.cycling(loop, task, BATCHES))
        times = interleaved(steps, device, common.rounds(list(steps.values()), device, args.budget), warmup=3)
        relative = ratios(times, counts[0])
        for count in counts:
            samples_per_s = 64 / statistics.median(times[count])
            rows.append([name, count, samples_per_s, relative[count]])
    torch.set_num_threads(args.threads)
    header = ["run (batch 64)", "threads", "samples/s", f"speed vs {counts[0]} thread"]
    others = [row[-1] for row in rows if row[1] != counts[0]]
    headline = {
        "what": f"`threads` {' vs '.join(map(str, counts))}",
        "goal": "—",
        "measured": f"{counts[-1]} threads: {min(others):.2f}–{max(others):.2f}×",
        "verdict": f"keep `threads: {counts[0]}`" if max(others) < 1 else f"`threads: {counts[-1]}` pays",
    }
    values = {"low": min(others), "high": max(others)}
    common.record(args, {"runs": common.table(header, rows)}, values, [headline])


if __name__ == "__main__":
    main()
