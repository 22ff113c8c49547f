"""Compiled regions (`compile: true`) vs eager: per training step, the compile's cost, and whole runs.

Per quick-suite task (conf/suite/quick.yaml's overrides) and model kind:
1. Steps: two copies of the model as `attnx train` builds it, one with its regions compiled
   (`attnx.nn.fusion.compile_regions`), train on the same batches, timed round-robin. The first
   compile writes into a fresh Inductor cache (cold); a third copy compiled from that cache is warm.
2. Runs (`--runs`): whole `attnx train` processes at the suite's budget, `compile=false` against
   `compile=true` on a cache warmed by one run before, alternating; wall seconds of the process,
   training seconds (compiling included) and the test metric.

    python benchmarks/compile.py [--runs 2] [--tasks reverse,sentiment] [--no-steps]
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import common
import torch
import yaml

from attnx.bench.measure import interleaved, ratios
from attnx.nn.fusion import compile_regions, stats
from attnx.table import markdown_table

SUITE = Path(__file__).parents[1] / "conf" / "suite" / "quick.yaml"
ARMS = {  # the quick suite's arm per task that has the most to compile; mqar's lm has no region
    "reverse": ["attention=additive"],
    "reverse (dot)": ["attention=dot"],  # Luong with input feeding
    "sentiment": ["attention=additive"],
    "listops": ["attention=additive"],
    "mqar": ["attention=multi_head"],
}
METRIC = {"reverse": "test/exact_match", "mqar": "test/acc"}
BATCHES = 8  # distinct training batches, cycled


def suite_overrides(task: str) -> list[str]:
    tasks = yaml.safe_load(SUITE.read_text())["tasks"]
    return [*tasks[task.split()[0]]["overrides"], *ARMS[task], "paired_embeddings=true"]


def compiled_copy(overrides: list[str], out: str, device: torch.device) -> tuple[object, float, dict]:
    """A training step of the model with its regions compiled, and the seconds its first BATCHES steps
    took (every graph compiled then: one per region and new shape)."""
    task, module, trainer = common.assemble([*overrides, "compile=false"], out)
    loop = common.PlainLoop(task, module, trainer.gradient_clip_val, 10**6, device)
    compile_regions(module.model)
    step = common.cycling(loop, task, BATCHES)
    started = time.perf_counter()
    for _ in range(BATCHES):
        step()
    return step, time.perf_counter() - started, stats()


def steps(args: object, device: torch.device) -> list[list[object]]:
    rows = []
    for name in args.tasks:
        overrides = suite_overrides(name)
        with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as cache:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
            task, module, trainer = common.assemble([*overrides, "compile=false"], out)
            eager = common.cycling(
                common.PlainLoop(task, module, trainer.gradient_clip_val, 10**6, device), task, BATCHES
            )
            compiled, cold, cold_stats = compiled_copy(overrides, out, device)
            _, warm, warm_stats = compiled_copy(overrides, out, device)
            rounds = common.rounds([eager, compiled], device, args.budget)
            times = interleaved({"eager": eager, "compiled": compiled}, device, rounds, warmup=1)
        ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        eager_first = ms["eager"] * BATCHES / 1e3
        rows.append(
            [
                name,
                ms["eager"],
                ms["compiled"],
                ratios(times, "eager")["compiled"],
                cold_stats["graphs"],
                cold - eager_first,
                warm - eager_first,
                f"{warm_stats['cache_hits']} / {warm_stats['cache_misses']}",
            ]
        )
    return rows


def runs(args: object) -> list[list[object]]:
    rows = []
    for name in args.tasks:
        overrides = suite_overrides(name)
        with tempfile.TemporaryDirectory() as root:
            cache = Path(root) / "cache"
            common.train_child([*overrides, "compile=true", f"compile_cache={cache}"], Path(root) / "warm-up")
            found: dict[str, list[dict]] = {"false": [], "true": []}
            for i in range(args.runs):
                for mode in ("false", "true") if i % 2 == 0 else ("true", "false"):
                    folder = Path(root) / f"{mode}{i}"
                    started = time.perf_counter()
                    record = common.train_child(
                        [*overrides, f"compile={mode}", f"compile_cache={cache}"], folder
                    )
                    record["wall"] = time.perf_counter() - started
                    found[mode].append(record)
        metric = METRIC.get(name.split()[0], "test/acc")
        eager, compiled = found["false"], found["true"]
        rows.append(
            [
                name,
                compiled[0]["steps"],
                median(eager, "wall"),
                median(compiled, "wall"),
                median(eager, "wall") / median(compiled, "wall"),
                median(eager, "train_seconds"),
                median(compiled, "train_seconds"),
                statistics.median((r["compile"] or {}).get("seconds", 0.0) for r in compiled),
                f"{statistics.median(r['metrics'][metric] for r in eager):.3f} / "
                f"{statistics.median(r['metrics'][metric] for r in compiled):.3f}",
            ]
        )
    return rows


def median(records: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in records)


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=2, help="whole runs per mode and task (0: steps only)")
    p.add_argument("--tasks", default=",".join(ARMS), help="comma-separated, of: " + ", ".join(ARMS))
    p.add_argument("--no-steps", action="store_true", help="whole runs only")
    args = p.parse_args()
    args.tasks = args.tasks.split(",")
    device = common.start(args)
    warnings.filterwarnings("ignore")
    header = [
        "task",
        "eager ms/step",
        "compiled ms/step",
        "speed",
        "graphs",
        f"compile s, cold ({BATCHES} steps)",
        "warm",
        "warm cache hits / misses",
    ]
    if not args.no_steps:
        print(markdown_table(header, steps(args, device)))
    if args.runs:
        header = [
            "task",
            "steps",
            "run s, eager",
            "compiled (warm cache)",
            "speed",
            "train s, eager",
            "compiled",
            "of which compiling",
            "metric eager / compiled",
        ]
        print()
        print(markdown_table(header, runs(args)))


if __name__ == "__main__":
    main()
