"""Benchmark 12: DDP on CPU, `trainer=ddp_cpu` (2 gloo processes, 1 thread each) against one process.

Whole `attnx train` processes of the same run (the default reverse model, dropout off so that both do the
same arithmetic), one process and two taken in turn for --rounds rounds, so both meet the same load. The
figures are results.json's training samples/s (the fit's batches only: start-up and evaluation excluded)
and the largest relative difference of the validation metrics between the two.

    python benchmarks/ddp_cpu.py [--rounds 3] [--devices 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from attnx.table import markdown_table

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


def run(overrides: list[str], folder: Path) -> dict:
    """One `attnx train` process; its results.json."""
    cli = "import sys, attnx.cli; sys.exit(attnx.cli.main(sys.argv[1:]))"
    args = ["train", *RUN, *overrides, f"hydra.run.dir={folder}"]
    subprocess.run([sys.executable, "-c", cli, *args], check=True, capture_output=True)
    return json.loads((folder / "results.json").read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3, help="runs of each, taken in turn")
    p.add_argument("--devices", type=int, default=2, help="DDP processes")
    args = p.parse_args()
    arms = {1: [], args.devices: ["trainer=ddp_cpu", f"trainer.devices={args.devices}"]}
    records: dict[int, list[dict]] = {n: [] for n in arms}
    with tempfile.TemporaryDirectory() as out:
        for r in range(args.rounds):
            for n, overrides in arms.items():
                records[n].append(run(overrides, Path(out) / f"{n}-{r}"))
    speed = {n: statistics.median(x["samples_per_second"] for x in rs) for n, rs in records.items()}
    one = records[1][0]["metrics"]
    drift = max(
        abs(x["metrics"][k] - v) / max(abs(v), 1e-12)
        for rs in records.values()
        for x in rs
        for k, v in one.items()
        if k.startswith("val/")
    )
    header = ["processes", "world_size", "samples/s (median)", "vs 1 process", "val/exact_match"]
    rows = []
    for n, rs in records.items():
        first = rs[0]
        rows.append(
            [
                n,
                first["world_size"],
                round(speed[n]),
                speed[n] / speed[1],
                first["metrics"]["val/exact_match"],
            ]
        )
    print(markdown_table(header, rows))
    print(f"largest relative difference of a val/ metric from the first 1-process run: {drift:.1e}")


if __name__ == "__main__":
    main()
