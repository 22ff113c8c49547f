"""Benchmark 17: Zoology's fairness recipe on MQAR (Arora et al. 2024, "Zoology" and "Simple linear attention
language models balance the recall-throughput tradeoff"): linear attention (Katharopoulos et al. 2020) and
Based (linear attention with exp's 2nd-order Taylor feature map, attnx/contrib/based.py), each with and
without the short causal convolution Zoology puts before every sub-quadratic mixer (`lm.conv=3`).

The setting is the issue's: 1,024 tokens of vocabulary, 64-token sequences, 4 key-value pairs, d 64, 2
attention-only layers of 1 head, batch 64, lr 1e-3, 100,000 training sequences. Zoology trains 3 epochs;
this runs `--epochs` (default 1, a third of its budget, ~5-7 min a run on one core) and prints validation
and test accuracy at the queries. One `attnx train -m` sweep, two runs at a time (joblib, one thread each).

    python benchmarks/zoology_based.py [--epochs 1] [--conv 0,3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

REPO = Path(__file__).resolve().parents[1]
SETTING = [
    "task=mqar", "task.vocab_size=1024", "task.seq_len=64", "task.num_kv_pairs=4", "task.train_size=100000",
    "task.val_size=1000", "task.test_size=1000", "task.batch_size=64", "lm.d_model=64", "lm.num_layers=2",
    "lm.ff_dim=0", "attention.num_heads=1", "optim.lr=0.001", "callbacks.attention_heatmaps=null",
    "threads=1",
    "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--conv", default="0,3", help="lm.conv values swept (0: no convolution)")
    parser.add_argument("--keep", type=Path, help="write the runs here instead of a temporary folder")
    args = parser.parse_args()
    print(common.machine())
    folder = args.keep or Path(tempfile.mkdtemp(prefix="attnx-zoology-based-"))
    started = time.perf_counter()
    command = [sys.executable, "-m", "attnx.cli", "train", "-m", "attention=linear,based",
               f"lm.conv={args.conv}", f"trainer.max_epochs={args.epochs}", *SETTING,
               f"hydra.sweep.dir={folder}"]  # fmt: skip
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    print(f"{args.epochs} epoch(s) of 100,000 sequences, runs in {wall / 60:.1f} min wall\n")
    print("| mechanism | lm.conv | val/acc | test/acc | train s |\n|---|---:|---:|---:|---:|")
    for path in sorted(folder.glob("*/results.json")):
        record = json.loads(path.read_text())
        cfg, metrics = record["config"], record["metrics"]
        print(f"| {cfg['attention']['name']} | {cfg['lm']['conv']} | {metrics['val/acc']:.3f} | "
              f"{metrics['test/acc']:.3f} | {record.get('train_seconds', float('nan')):.0f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
