"""Benchmark 11: the wall time of `attnx compare` on the quick suite, and of launching it again.

One child process runs the whole study (`attnx compare attention=CANDIDATE suite=quick out=<fresh folder>`:
every run through joblib, `attnx bench`, the report), timed as a whole; the same command is then launched
again, which must train nothing. Printed: both wall times, the child's CPU seconds, the runs and how long they
trained, the report's convergence and discrimination sections and its paired verdicts (the candidate's family,
then the classic arms' context), and each task's calibration: the mean validation curve of the baseline arm
and of the task's best arm at the suite's budget. The goal is the issue's: the quick suite in at most 15
minutes on 2 cores.

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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GOAL_SECONDS = 15 * 60


def timed(command: list[str]) -> tuple[float, int]:
    """(wall seconds, exit code). Wall time is the goal's measure; the CPU time of joblib's workers does
    not reach this process (they are not its children), so none is reported."""
    started = time.perf_counter()
    code = subprocess.run(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    return time.perf_counter() - started, code


def section(markdown: str, title: str) -> str:
    """The report section whose heading is `title`, up to the next heading of its level."""
    start = markdown.find(f"## {title}")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end > 0 else None] if start >= 0 else f"(no {title} section)"


def paired_rows(markdown: str) -> str:
    """The report's paired verdicts (Statistics: every pair of each task, the candidate's first), one line
    each."""
    table = section(markdown, "Statistics")
    rows = [" ".join(line.split()) for line in table.splitlines() if line.startswith("| task=")]
    return "\n".join(rows)


def calibration(runs: list[dict], metrics: dict[str, str]) -> str:
    """Per task, the validation curve of the baseline arm and of the task's best arm (mean over seeds at
    each validation; "(k)": only k runs got that far, the others had stopped converged)."""
    by = _by_arm(runs)
    lines = ["| task | arm | validation curve (mean over seeds) |", "| --- | --- | --- |"]
    for task in sorted({t for t, _ in by}):
        arms = [arm for t, arm in by if t == task]
        best = max(arms, key=lambda arm: _mean(r["metrics"].get(metrics[task], 0.0) for r in by[(task, arm)]))
        for arm in dict.fromkeys(a for a in ("additive", best) if a in arms):
            lines.append(f"| {task} | {arm} | {_mean_curve(by[(task, arm)])} |")
    return "\n".join(lines)


def _by_arm(runs: list[dict]) -> dict[tuple[str, str], list[dict]]:
    by: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        by.setdefault((run["choices"]["task"], run["choices"]["attention"]), []).append(run)
    return by


def _mean(values: Any) -> float:
    found = list(values)
    return sum(found) / len(found)


def _mean_curve(runs: list[dict]) -> str:
    curves = [r["curve"].get(r["convergence"]["metric"], []) for r in runs]
    means = []
    for i in range(max(len(c) for c in curves)):
        at = [c[i][1] for c in curves if len(c) > i]
        means.append(f"{_mean(at):.2f}" + ("" if len(at) == len(curves) else f"({len(at)})"))
    return " ".join(means)


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
    report = (folder / "report.md").read_text()
    print(report.split("## Ranking")[0].split("**Verdicts**")[-1].strip())  # the family, alpha, the floor
    for title in ("Convergence", "Discrimination"):
        print(section(report, title))
    # each run's convergence was judged on the val/ twin of its task's suite metric
    metrics = {r["choices"]["task"]: "test/" + r["convergence"]["metric"].split("/", 1)[1] for r in completed}
    print(paired_rows(report))
    print(calibration(completed, metrics))
    return 0 if code == 0 and code_again == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
