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

SUITE = Path(__file__).parents[1] / "conf" / "suite" / "quick.yaml"
ARMS = {  # the quick suite's arm per task that has the most to compile; mqar's lm has no region
    "reverse": ["attention=additive"],
    "reverse (dot)": ["attention=dot"],  # Luong with input feeding
    "sentiment": ["attention=additive"],
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
    tables, values, headlines = {}, {}, []
    if not args.no_steps:
        rows = steps(args, device)
        tables["steps"] = common.table(header, rows)
        speed = {key(row[0]): row[3] for row in rows}
        rnn = [row for row in rows if row[4]]  # the tasks with a region to compile
        values |= {"step": speed, "step_low": min(r[3] for r in rnn), "step_high": max(r[3] for r in rnn)}
        values |= {"cold": {key(row[0]): row[5] for row in rows}, "warm_high": max(r[6] for r in rows)}
        seq2seq = [speed[key(name)] for name in args.tasks if name.startswith("reverse")]
        headlines.append(
            {
                "what": "compiled regions (`compile`) per training step, rnn seq2seq",
                "goal": "≥ 2×",
                "measured": f"{min(seq2seq):.2f}–{max(seq2seq):.2f}×",
                "verdict": common.verdict(min(seq2seq) >= 2),
            }
        )
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
        rows = runs(args)
        tables["runs"] = common.table(header, rows)
        rnn = [row for row in rows if row[7]]
        values |= {"run_low": min(r[4] for r in rnn), "run_high": max(r[4] for r in rnn)}
        values |= {"warm_compile_low": min(r[7] for r in rnn), "warm_compile_high": max(r[7] for r in rnn)}
        values |= {"steps_low": min(r[1] for r in rows), "steps_high": max(r[1] for r in rows)}
        headlines.append(
            {
                "what": "whole quick-suite runs, `compile=true` (warm cache) vs eager",
                "goal": "faster than eager",
                "measured": f"{values['run_low']:.2f}–{values['run_high']:.2f}×",
                "verdict": "`compile: auto` leaves them eager"
                if values["run_high"] < 1
                else common.verdict(values["run_low"] >= 1),
            }
        )
    common.record(args, tables, values, headlines)


def key(task: str) -> str:
    """A task's row as prose cites it: `reverse (dot)` is `reverse_dot`."""
    return task.replace(" (", "_").rstrip(")")


if __name__ == "__main__":
    main()
