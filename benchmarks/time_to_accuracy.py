"""Benchmark 9: time to accuracy, whole `attnx train` processes against Joey NMT's reverse recipe.

Each run is `attnx train` in a child process on the reference's data specification (integers 0-49,
train lengths 1-25, 50k examples; val and test lengths 1-30, 1k each, val drawn like test), stopped
by `callbacks.stop_at` once the validation metric reaches the threshold (validated 4 times an epoch,
within a budget of 2 epochs whose length the cosine schedule follows). The figure is the child's
CPU time (user + system, from the OS: the machine is shared, so not wall time) for the whole
process, start-up and the final test included, next to its test exact match.

    python benchmarks/time_to_accuracy.py [--seeds 0 1 2] [--threshold 0.98]
        [--config "bucketed=bucketing=true"] [--no-default]

Reference (measured on this machine type, 1 thread): Joey NMT 2.3.0's `rnn_reverse` recipe (BiLSTM 64,
LSTM decoder with Luong attention and input feeding, batch 10) needs 477 CPU-seconds to reach 95% dev
sequence accuracy and ends at 97.9% test sequence accuracy. Goal: <= 0.25x its time with >= 97.9%.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Any

import common

REFERENCE = {
    "name": "Joey NMT 2.3.0 rnn_reverse (to 95% dev)",
    "cpu_seconds": 477.0,
    "test_exact_match": 0.979,
}
SPEC = [
    "task=reverse",
    "task.vocab_size=50",
    "task.min_len=1",
    "task.max_len=25",
    "task.test_min_len=1",
    "task.test_max_len=30",
    "task.val_like_test=true",
    "task.train_size=50000",
    "task.val_size=1000",
    "task.test_size=1000",
    "threads=1",
]


def stop_at(metric: str, threshold: float) -> list[str]:
    return [
        f"callbacks.model_checkpoint.monitor={metric}",
        "callbacks.model_checkpoint.mode=max",
        f"callbacks.stop_at.stopping_threshold={threshold}",
        "trainer.val_check_interval=0.25",  # four chances per epoch to stop
        "callbacks.attention_heatmaps=null",  # drawing figures is not training: the reference draws none
        "logger=csv",
    ]


def row(
    name: str, seed: int | str, cpu: float, test: float, val: float | str, epochs: str, speed: str
) -> list:
    ratio = cpu / REFERENCE["cpu_seconds"]
    return [name, seed, f"{cpu:.0f}", f"{ratio:.2f}×", f"{test:.3f}", val, epochs, speed]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--metric", default="val/exact_match", help="the validation metric to reach")
    p.add_argument("--threshold", type=float, default=0.99, help="stop once the metric reaches this")
    p.add_argument("--max-epochs", type=int, default=2, help="the budget (and the schedule's length)")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=OVERRIDES",
        help='an extra configuration, e.g. "random batches=bucketing=false" (overrides separated by spaces)',
    )
    p.add_argument("--no-default", action="store_true", help="skip the default configuration")
    p.add_argument("--keep", type=Path, help="keep the run folders here (default: a temporary folder)")
    common.results_argument(p)
    args = p.parse_args()
    common.begin()

    configs = {} if args.no_default else {"attnx defaults": []}
    for item in args.config:
        name, _, overrides = item.partition("=")
        configs[name] = overrides.split()
    base = [*SPEC, f"trainer.max_epochs={args.max_epochs}", *stop_at(args.metric, args.threshold)]
    root = args.keep or Path(tempfile.mkdtemp(prefix="tta-"))
    header = [
        "configuration",
        "seed",
        "CPU-s",
        "vs reference",
        "test exact match",
        "val at stop",
        "epochs",
        "samples/s",
    ]
    rows = [row(REFERENCE["name"], "", REFERENCE["cpu_seconds"], REFERENCE["test_exact_match"], 0.95, "", "")]
    values: dict[str, Any] = {"reference": REFERENCE, "threshold": args.threshold, "seeds": len(args.seeds)}
    print(
        f"threshold {args.metric} >= {args.threshold}, max_epochs {args.max_epochs}; runs in {root}",
        flush=True,
    )
    for name, overrides in configs.items():
        records = []
        for seed in args.seeds:
            folder = root / f"{name.replace(' ', '_')}-{seed}"
            folder.mkdir(parents=True, exist_ok=True)
            r = common.train_child([*base, *overrides, f"seed={seed}"], folder)
            records.append(r)
            task = r["config"]["task"]
            steps_per_epoch = -(-task["train_size"] // task["batch_size"])
            m = r["metrics"]
            rows.append(
                row(
                    name,
                    seed,
                    r["cpu_seconds"],
                    m["test/exact_match"],
                    f"{m[args.metric]:.3f}" + ("" if m[args.metric] >= args.threshold else " (not reached)"),
                    f"{r['steps'] / steps_per_epoch:.2f}",
                    f"{r['samples_per_second']:.0f}",
                )
            )
            print(" | ".join(str(c) for c in rows[-1]), flush=True)
        cpu = [r["cpu_seconds"] for r in records]
        test = [r["metrics"]["test/exact_match"] for r in records]
        median = statistics.median(cpu)
        values[name.replace(" ", "_")] = {
            "cpu": median,
            "cpu_low": min(cpu),
            "cpu_high": max(cpu),
            "ratio": median / REFERENCE["cpu_seconds"],
            "test": statistics.median(test),
            "test_low": min(test),
            "test_high": max(test),
            "reached": sum(r["metrics"][args.metric] >= args.threshold for r in records),
        }
        rows.append(
            [
                f"**{name}: median of {len(records)}**",
                "",
                f"**{median:.0f}** ({min(cpu):.0f}–{max(cpu):.0f})",
                f"**{median / REFERENCE['cpu_seconds']:.2f}×**",
                f"**{statistics.median(test):.3f}** ({min(test):.3f}–{max(test):.3f})",
                "",
                "",
                f"{statistics.median(r['samples_per_second'] for r in records):.0f}",
            ]
        )
    headlines = []
    if "attnx defaults" in configs:
        d, reference = values["attnx_defaults"], REFERENCE["cpu_seconds"]
        met = d["ratio"] <= 0.25 and d["test_low"] >= REFERENCE["test_exact_match"]
        headlines.append(
            {
                "what": f"time to accuracy on reverse vs Joey NMT's recipe ({reference:.0f} CPU-s)",
                "goal": f"≤ 0.25× with ≥ {REFERENCE['test_exact_match']:.1%} test",
                "measured": f"{d['ratio']:.2f}× ({d['cpu']:.0f} CPU-s, median of {len(args.seeds)}), "
                f"{d['test']:.3f} test",
                "verdict": common.verdict(met),
            }
        )
    common.record(args, {"runs": common.table(header, rows)}, values, headlines)


if __name__ == "__main__":
    main()
