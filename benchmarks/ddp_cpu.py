"""Benchmark 12: DDP on CPU, `trainer=ddp_cpu` (2 gloo processes, 1 thread each) against one process.

Whole `attnx train` processes of the same run (the default reverse model, dropout off so that both do
the same arithmetic), one process and two taken in turn for --rounds rounds (who goes first alternating),
so that a round's two runs meet about the same load. The figures: results.json's training samples/s (the
fit's batches only: start-up and evaluation excluded), the median of per-round ratios, and the largest
relative difference of the validation metrics between the runs.

    python benchmarks/ddp_cpu.py [--rounds 6] [--devices 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import common

RUN = [
    "task=reverse",
    "task.train_size=4000",
    "task.val_size=500",
    "trainer.max_epochs=2",
    "decoder.dropout=0",
    "model.dropout=0",
    "test=false",
    "callbacks.attention_heatmaps=null",
    "logger=csv",
    "threads=1",
]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common.results_argument(p)
    p.add_argument("--rounds", type=int, default=6, help="runs of each, taken in turn")
    p.add_argument("--devices", type=int, default=2, help="DDP processes")
    args = p.parse_args()
    common.begin()
    arms = {1: [], args.devices: ["trainer=ddp_cpu", f"trainer.devices={args.devices}"]}
    records: dict[int, list[dict]] = {n: [] for n in arms}
    with tempfile.TemporaryDirectory() as out:
        for r in range(args.rounds):
            for n in [*arms][r % 2 :] + [*arms][: r % 2]:  # who goes first alternates
                records[n].append(common.train_child([*RUN, *arms[n]], Path(out) / f"{n}-{r}"))
    speed = {n: statistics.median(x["samples_per_second"] for x in rs) for n, rs in records.items()}
    base = records[1]
    relative = {  # the median of per-round ratios
        n: statistics.median(x["samples_per_second"] / y["samples_per_second"] for x, y in zip(rs, base))
        for n, rs in records.items()
    }
    drift = max(
        abs(x["metrics"][k] - v) / max(abs(v), 1e-12)
        for rs in records.values()
        for x in rs
        for k, v in base[0]["metrics"].items()
        if k.startswith("val/")
    )
    header = ["processes", "world_size", "samples/s (median)", "vs 1 process", "val/exact_match"]
    rows = [
        [n, rs[0]["world_size"], round(speed[n]), relative[n], rs[0]["metrics"]["val/exact_match"]]
        for n, rs in records.items()
    ]
    ratio = relative[args.devices]
    headline = {
        "what": f"`trainer=ddp_cpu` ({args.devices} gloo processes) vs 1 process, samples/s, whole runs",
        "goal": "—",
        "measured": f"{ratio:.2f}× (median of {args.rounds} rounds); val metrics within {drift:.1e} relative",
        "verdict": "for checking a run before a cluster",
    }
    values = {"ratio": ratio, "drift": drift, "rounds": args.rounds, "steps": base[0]["steps"]}
    common.record(args, {"processes": common.table(header, rows)}, values, [headline])


if __name__ == "__main__":
    main()
