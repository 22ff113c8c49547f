"""The README's first screen, measured: `make run` on a fresh clone, and again once `.venv` exists.

A fresh clone of this checkout's HEAD (`git clone`, so nothing uncommitted comes along) in a temporary
folder: `make run` there sets up `.venv` (pip: CPU torch and attnx's requirements, from the package index
or pip's cache), trains the `quickstart` experiment and prints `attnx report`'s table, timed whole (wall);
then `make run` again, which finds `.venv` and only trains and reports; then the single run the README
shows, `attnx train`, whose results.json gives its test exact match and training seconds. The report's
printed output (its table and the line that says what it wrote, paths relative to the clone) is kept as
the README shows it.

    python benchmarks/quickstart.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common


def timed(command: list[str], cwd: Path) -> tuple[float, str]:
    """(wall seconds, what it printed); a failure ends the benchmark with its output."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed in {cwd}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return time.perf_counter() - started, done.stdout


def report_output(printed: str) -> str:
    """`attnx report`'s part of `make run`'s output: its table and the line after it."""
    lines = printed.rstrip().splitlines()
    last = max(i for i, line in enumerate(lines) if re.match(r"\d+/\d+ runs completed", line))
    first = last
    while first > 0 and (lines[first - 1].startswith("|") or not lines[first - 1].strip()):
        first -= 1
    return "\n".join(lines[first : last + 1]).strip()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep", type=Path, help="clone into this (new) folder instead of a temporary one")
    common.results_argument(p)
    args = p.parse_args()
    common.begin()
    print(common.machine())
    clone = args.keep or Path(tempfile.mkdtemp(prefix="attnx-quickstart-")) / "attnx"
    subprocess.run(["git", "clone", "--quiet", str(common.REPO), str(clone)], check=True)
    setup, _ = timed(["make", "run"], clone)
    again, printed = timed(["make", "run"], clone)
    output = report_output(printed)
    single, _ = timed([".venv/bin/attnx", "train", "hydra.run.dir=outputs/single"], clone)
    record = json.loads((clone / "outputs" / "single" / "results.json").read_text())
    values = {
        "setup_seconds": setup,
        "run_seconds": again,
        "train_wall_seconds": single,
        "train_seconds": record["train_seconds"],
        "exact_match": record["metrics"]["test/exact_match"],
    }
    print(f"make run, fresh clone: {setup:.0f} s; again: {again:.0f} s\n{output}")
    print(f"attnx train: test exact match {values['exact_match']:.3f} after {values['train_seconds']:.0f} s")
    common.record(args, values=values, texts={"output": output})
    print(f"clone: {clone}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
