"""Benchmark 11: the wall time of `attnx compare` on the quick suite, and of launching it again.

One child process runs the whole study (`attnx compare attention=CANDIDATE suite=quick out=<fresh
folder>`: every run through joblib, `attnx bench`, the report), timed as a whole; the same command is
then launched again, which must train nothing. Printed: both wall times, the child's CPU seconds, the
runs and how long they trained, and the study's result table. The goal is the issue's: the quick suite
in at most 15 minutes on 2 cores.

    python benchmarks/compare_quick.py [--candidate local_window] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL_SECONDS = 15 * 60


def timed(command: list[str]) -> tuple[float, int]:
    """(wall seconds, exit code). Wall time is the goal's measure; the CPU time of joblib's workers does
    not reach this process (they are not its children), so none is reported."""
    started = time.perf_counter()
    code = subprocess.run(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    return time.perf_counter() - started, code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", default="local_window", help="attention=NAME of the candidate")
    parser.add_argument("--keep", type=Path, help="write the study here instead of a temporary folder")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="attnx-compare-"))
    command = [sys.executable, "-m", "attnx.cli", "compare", f"attention={args.candidate}", f"out={folder}"]
    load = os.getloadavg()[0]
    first, code = timed(command)
    load_after = os.getloadavg()[0]
    again, code_again = timed(command)
    runs = [json.loads(p.read_text()) for p in sorted((folder / "runs").glob("*/results.json"))]
    completed = [r for r in runs if r["status"] == "completed"]
    trained = sum(r.get("train_seconds") or 0 for r in completed)
    print("| what | value |\n| --- | ---: |")
    verdict = "met" if first <= GOAL_SECONDS else "missed"
    print(f"| compare, first launch (wall) | {first / 60:.1f} min ({verdict}: goal ≤ 15) |")
    print(f"| load average (1 min) before, after | {load:.1f}, {load_after:.1f} |")
    print(f"| runs completed | {len(completed)}/{len(runs)} |")
    print(f"| training time summed over runs | {trained / 60:.1f} min |")
    print(f"| launched again (wall), nothing to train | {again:.1f} s |")
    print(f"| exit codes | {code}, {code_again} |")
    print(f"\nreport: {folder / 'report.html'}")
    return 0 if code == 0 and code_again == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
