"""Benchmark 5: start-up time of `attnx --help` and `attnx train --cfg job`, and the whole conformance kit
(`attnx plugins check` on one core), whole processes.

Each command runs as a fresh process (the console script of this environment), round-robin with
`python -c pass` and `python -c "import torch"` as references measured under the same load; the table
gives the median wall time of each. The kit's process is pinned to one CPU where the OS allows it.

    python benchmarks/startup.py [--runs 9]

Goals: `attnx --help` < 1.5 s, `attnx train --cfg job` < 3 s, `attnx plugins check` < 15 s on one core.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import common

from attnx.testing import CHECKS

BIN = Path(sys.executable).parent
COMMANDS = {
    "python -c pass": ([sys.executable, "-c", "pass"], None),
    'python -c "import torch"': ([sys.executable, "-c", "import torch"], None),
    "attnx --help": ([str(BIN / "attnx"), "--help"], 1.5),
    "attnx train --cfg job": ([str(BIN / "attnx"), "train", "--cfg", "job"], 3.0),
    "attnx plugins check (one core)": ([str(BIN / "attnx"), "plugins", "check"], 15.0),
}
ONE_CORE = {"attnx plugins check (one core)"}
KEYS = {  # the names prose cites them by
    "python": "python -c pass",
    "torch": 'python -c "import torch"',
    "help": "attnx --help",
    "cfg_job": "attnx train --cfg job",
    "kit": "attnx plugins check (one core)",
}


def one_core() -> None:
    """Pin the child to the first CPU this process may use (Linux); elsewhere it runs unpinned."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def wall(argv: list[str], pinned: bool = False) -> float:
    started = time.perf_counter()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    subprocess.run(
        argv, check=True, stdout=subprocess.DEVNULL, env=env, preexec_fn=one_core if pinned else None
    )
    return time.perf_counter() - started


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=9)
    args = p.parse_args()
    common.start(args)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, (argv, _goal) in COMMANDS.items():
            times[name].append(wall(argv, name in ONE_CORE))
    rows, headlines = [], []
    for name, (_argv, goal) in COMMANDS.items():
        median = statistics.median(times[name])
        verdict = "-" if goal is None else common.verdict(median < goal)
        rows.append([f"`{name}`", median, max(times[name]), "-" if goal is None else f"< {goal} s", verdict])
        if goal is not None:
            what = f"`{name}` start-up" if name != KEYS["kit"] else f"the kit, {len(CHECKS)} checks, 1 core"
            measured = f"{median:.2f} s"
            headlines.append({"what": what, "goal": f"< {goal} s", "measured": measured, "verdict": verdict})
    values = {key: statistics.median(times[name]) for key, name in KEYS.items()}
    values |= {"kit_max": max(times[KEYS["kit"]]), "kit_checks": len(CHECKS), "runs": args.runs}
    table = common.table(["command", "median s", "max s", "goal", ""], rows)
    common.record(args, {"commands": table}, values, headlines)


if __name__ == "__main__":
    main()
