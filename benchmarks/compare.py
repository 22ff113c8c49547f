"""Benchmarks 11 and 18: `attnx compare` on a suite, timed whole, and the tables its report publishes.

Per candidate, one child process runs the whole study (`attnx compare suite=SUITE attention=CANDIDATE
[OVERRIDES]` in a fresh folder: every run through joblib, `attnx bench`, the report), timed as a whole (wall
clock, the goal's measure); the same command is then launched again, which must train nothing. Recorded:
both wall times, the runs and how long they trained, and the report's (report.md) Ranking, Budget,
Discrimination, paired Statistics and, for a suite of capabilities, Capabilities tables. Across candidates,
one ranking and one budget table (the classic arms' rows from the first compare, whose runs the others repeat:
same seeds, same configs; each candidate's from its own) and one table of each candidate's family of paired
verdicts. Per task, the
validation curve of its best classic arm at the suite's budget (mean over seeds at each validation; "(k)":
only k runs got that far, the others had stopped converged). With a `sliding_window` arm, the share of each
recall task's test answers its window can read (`window_ceiling` at w and 2w − 1, from the test split
itself). The quick suite's goal: at most 15 minutes on 2 cores.

    python benchmarks/compare.py [--suite quick] [--candidate local_window,linear] [--screenshot PNG]
        [--keep DIR] [-- OVERRIDES...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

DEFAULT_SUITE = "quick"  # conf/compare.yaml's
GOAL_MINUTES = {"quick": 15}  # a suite without a goal is measured only
SUITE_LINE = re.compile(r"Suite \*\*(?P<suite>\S+)\*\*: (?P<tasks>\d+) tasks?, seeds \[(?P<seeds>[^\]]*)\]")


def timed(command: list[str], cwd: Path) -> tuple[float, int]:
    """(wall seconds, exit code). The CPU time of joblib's workers does not reach this process (they are
    not its children), so none is reported."""
    started = time.perf_counter()
    code = subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started, code.returncode


def tables(markdown: str) -> dict[str, list[tuple[list[str], list[list[str]]]]]:
    """The report's tables by section (`## Title`), each (header, rows) of cell texts."""
    found: dict[str, list[tuple[list[str], list[list[str]]]]] = {}
    for section in re.split(r"^## ", markdown, flags=re.M)[1:]:
        title, _, body = section.partition("\n")
        for block in re.findall(r"(?:^\|.*\n?)+", body, flags=re.M):
            parsed = common.parse_table(block)
            found.setdefault(title, []).append((parsed["header"], parsed["rows"]))
    return found


def study(candidate: str, suite: str, overrides: list[str], root: Path) -> dict[str, Any]:
    """One compare, launched twice from `root` into its default folder (so that the command its report
    shows is the one a user types): its timings, runs and report tables."""
    chosen = [] if suite == DEFAULT_SUITE else [f"suite={suite}"]
    command = [sys.executable, "-m", "attnx.cli", "compare", *chosen, f"attention={candidate}", *overrides]
    folder = root / "compare" / suite / candidate
    load = os.getloadavg()[0]
    first, code = timed(command, root)
    load_after = os.getloadavg()[0]
    again, code_again = timed(command, root)
    if code or code_again:
        raise SystemExit(f"attnx compare exited {code}, then {code_again}: {' '.join(command)}")
    runs = [json.loads(p.read_text()) for p in sorted((folder / "runs").glob("*/results.json"))]
    completed = [r for r in runs if r["status"] == "completed"]
    report = (folder / "report.md").read_text()
    found = tables(report)
    line = SUITE_LINE.search(report)
    discrimination = found["Discrimination"][0][1] if "Discrimination" in found else []
    return {
        "candidate": candidate,
        "folder": folder,
        "runs": completed,
        "report": found,
        "values": {
            "minutes": first / 60,
            "again": again,
            "runs": len(runs),
            "completed": len(completed),
            "train_minutes": sum(r.get("train_seconds") or 0 for r in completed) / 60,
            "stored": sum("stored" in r for r in completed),  # taken from the run store, not trained here
            "load_before": load,
            "load_after": load_after,
            "tasks": int(line["tasks"]),
            "seeds": len(line["seeds"].split(",")),
            "arms": len(found["Ranking"][0][1]),
            "discriminating": sum(row[-1] == "passes" for row in discrimination),
        },
    }


def same_classic(first: dict[str, Any], other: dict[str, Any]) -> str:
    """Whether `other`'s Ranking gives the classic arms the first compare's mean (95% CI) on every task."""
    header, rows = first["report"]["Ranking"][0]
    tasks = len(header) - 3
    mine = {row[0]: row[1 : 1 + tasks] for row in rows if row[0] != first["candidate"]}
    theirs = {row[0]: row[1 : 1 + tasks] for row in other["report"]["Ranking"][0][1] if row[0] in mine}
    return "identical" if theirs == {k: v for k, v in mine.items() if k in theirs} else "**differ**"


def merged(studies: list[dict[str, Any]], section: str, columns: int) -> dict:
    """The first `columns` columns of the report's `section` table (mechanism x task): the classic arms' rows
    from the first compare, each candidate's from its own."""
    header, rows = studies[0]["report"][section][0]
    candidates = {s["candidate"] for s in studies}
    found = [row[:columns] for row in rows if row[0] not in candidates]
    for s in studies:
        own = next(row for row in s["report"][section][0][1] if row[0] == s["candidate"])
        found.append([f"`{s['candidate']}` (candidate)", *own[1:columns]])
    return common.table(header[:columns], found, right_from=1)


PAIR_COLUMNS = ("cell", "pair", "n", "Δ", "95% CI", "d_z", "MDE", "p", "floor", "p (Holm)", "verdict")


def paired(studies: list[dict[str, Any]]) -> tuple[dict, dict[str, dict[str, str]]]:
    """Each candidate's family: its paired verdicts against every other arm of each task, as its report
    gives them; also by `task/candidate/other`, for prose. (The classic arms' pairs are context, in each
    report.)"""
    rows: list[list[str]] = []
    for s in studies:
        for head, body in s["report"].get("Statistics", []):
            if head[:3] == ["cell", "pair", "family"]:
                rows += [[row[head.index(c)] for c in PAIR_COLUMNS] for row in body if row[2] == "family"]
    by = {}
    for row in rows:
        a, b = (side.strip(" `") for side in row[1].split(" − "))
        by[f"{row[0].removeprefix('task=')}/{a}/{b}"] = dict(zip(PAIR_COLUMNS, row))
    return common.table(list(PAIR_COLUMNS), rows, right_from=2), by


def arm(run: dict) -> str:
    """The arm of a compare's run: its job's `attention=` (`encoder/attention=` at an encoder site)."""
    chosen = dict(o.split("=", 1) for o in run["overrides"] if "=" in o)
    return chosen.get("encoder/attention") or chosen["attention"]


def curves(runs: list[dict], candidates: set[str]) -> dict:
    """Per task, the mean validation curve of the classic arm with the best mean test metric."""
    by: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        by.setdefault((run["choices"]["task"], arm(run)), []).append(run)
    rows = []
    for task in dict.fromkeys(t for t, _ in by):
        classic = [a for t, a in by if t == task and a not in candidates]
        best = max(classic, key=lambda a: _mean(metric(r) for r in by[(task, a)]))
        rows.append([task, best, _mean_curve(by[(task, best)])])
    return common.table(["task", "arm", "validation curve (mean over seeds)"], rows)


def metric(run: dict) -> float:
    """The test twin of the metric the run's convergence was judged on."""
    return run["metrics"]["test/" + run["convergence"]["metric"].split("/", 1)[1]]


def ceilings(runs: list[dict]) -> dict | None:
    """Per recall task, the share of test answers one sliding window, and two stacked, can read."""
    from attnx.registry import load_all, registry

    load_all()
    row, cells = ["— its window ceiling, 1 / 2 layers"], 0
    tasks = list(dict.fromkeys(r["choices"]["task"] for r in runs))
    windowed = {r["choices"]["task"]: r for r in runs if arm(r) == "sliding_window"}
    for task in tasks:
        window = windowed.get(task)
        cls = registry("task").get(window["config"]["task"]["name"]) if window else None
        if window is None or not hasattr(cls, "window_ceiling") or not window["config"].get("attention"):
            row.append("")
            continue
        w = window["config"]["attention"]["window"]
        built = cls(**{k: v for k, v in window["config"]["task"].items() if k != "name"})
        row.append(f"{built.window_ceiling(w):.3f} / {built.window_ceiling(2 * w - 1):.3f}")
        cells += 1
    return common.table(["", *tasks], [row], right_from=1) if cells else None


def screenshot(html: Path, png: Path) -> None:
    """The top of report.html down to the ranking's caption, in headless Chromium (`make chromium`)."""
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("ATTNX_CHROMIUM") or shutil.which("chromium")
    if chromium is None:
        raise SystemExit("--screenshot needs Chromium: make chromium (as root), or set ATTNX_CHROMIUM")
    width = 1100
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto(html.resolve().as_uri())
        box = page.locator("table").first.bounding_box()  # the ranking, the report's first table
        clip = {"x": 0, "y": 0, "width": width, "height": box["y"] + box["height"] + 60}  # and its caption
        page.screenshot(path=str(png), clip=clip)
        browser.close()


def _mean(values: Any) -> float:
    found = list(values)
    return sum(found) / len(found)


def _mean_curve(runs: list[dict]) -> str:
    curves_ = [r["curve"].get(r["convergence"]["metric"], []) for r in runs]
    means = []
    for i in range(max(len(c) for c in curves_)):
        at = [c[i][1] for c in curves_ if len(c) > i]
        means.append(f"{_mean(at):.2f}" + ("" if len(at) == len(curves_) else f"({len(at)})"))
    return " ".join(means)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", default=DEFAULT_SUITE)
    p.add_argument("--candidate", default="local_window,linear", help="attention=NAME of each candidate")
    p.add_argument("--keep", type=Path, help="write the studies here instead of a temporary folder")
    p.add_argument("--screenshot", type=Path, help="save the top of the first report.html here (PNG)")
    p.add_argument("overrides", nargs="*", help="after --: overrides every compare takes")
    common.results_argument(p)
    args = p.parse_args()
    common.begin()
    print(common.machine())
    root = args.keep or Path(tempfile.mkdtemp(prefix="attnx-compare-"))
    candidates = args.candidate.split(",")
    root.mkdir(parents=True, exist_ok=True)
    studies = [study(c, args.suite, args.overrides, root) for c in candidates]
    if args.screenshot:
        screenshot(studies[0]["folder"] / "report.html", args.screenshot)
    first = studies[0]["values"]
    timing = [
        ["compare, first launch (wall)", *(f"{s['values']['minutes']:.1f} min" for s in studies)],
        ["runs completed", *(f"{s['values']['completed']}/{s['values']['runs']}" for s in studies)],
        ["training time summed over runs", *(f"{s['values']['train_minutes']:.1f} min" for s in studies)],
        ["load average (1 min) before, after"]
        + [f"{s['values']['load_before']:.1f}, {s['values']['load_after']:.1f}" for s in studies],
        ["of which taken from the run store", *(f"{s['values']['stored']}" for s in studies)],
        ["classic arms' means as the first compare's", *(same_classic(studies[0], s) for s in studies)],
        ["launched again (wall), nothing to train", *(f"{s['values']['again']:.1f} s" for s in studies)],
        ["tasks passing the discrimination rule"]
        + [f"{s['values']['discriminating']}/{s['values']['tasks']}" for s in studies],
    ]
    table_of_pairs, by_pair = paired(studies)
    found = {
        "timing": common.table(["what", *(f"`{c}`" for c in candidates)], timing, right_from=1),
        # mechanism, the tasks (then the Ranking's mean rank and W/T/L, left out)
        "ranking": merged(studies, "Ranking", len(studies[0]["report"]["Ranking"][0][0]) - 2),
        "budget": merged(studies, "Budget", len(studies[0]["report"]["Budget"][0][0])),
        "paired": table_of_pairs,
        "curves": curves(studies[0]["runs"], set(candidates)),
    }
    if "Discrimination" in studies[0]["report"]:
        found["discrimination"] = common.table(*studies[0]["report"]["Discrimination"][0], right_from=1)
    if "Capabilities" in studies[0]["report"]:
        header, rows = studies[0]["report"]["Capabilities"][0]
        found["capabilities"] = common.table(header, rows, right_from=1)
        window = ceilings(studies[0]["runs"])
        if window is not None:
            found["window_ceilings"] = window
    values = {s["candidate"]: s["values"] for s in studies} | {"paired": by_pair, "suite": args.suite}
    for name in ("ranking", "budget", "capabilities"):  # `{ranking[additive][reverse]}`: a cell, for prose
        if name in found:
            header, rows = found[name]["header"], found[name]["rows"]
            arms = [row[0].strip("`").removesuffix("` (candidate)") for row in rows]
            values[name] = {a: dict(zip(header[1:], row[1:])) for a, row in zip(arms, rows)}
    goal = GOAL_MINUTES.get(args.suite)
    others = "".join(f" (`{s['candidate']}`, {s['values']['runs']} runs: {s['values']['minutes']:.1f} min)"
                     for s in studies[1:])  # fmt: skip
    headline = {
        "what": f"`attnx compare suite={args.suite} attention={candidates[0]}`, {first['arms']} arms × "
        f"{first['tasks']} tasks × {first['seeds']} seeds ({first['runs']} runs, bench, report), wall",
        "goal": f"≤ {goal} min" if goal else "measured",
        "measured": f"{first['minutes']:.1f} min{others}; relaunched: {first['again']:.0f} s, none trained",
        "verdict": common.verdict(all(s["values"]["minutes"] <= goal for s in studies)) if goal else "",
    }
    common.record(args, found, values, [headline], name=f"compare.{args.suite}")
    print(f"studies: {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
