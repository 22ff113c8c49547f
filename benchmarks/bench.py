"""`attnx bench` as benchmarks/README.md shows it: a named configuration run whole, its printed tables kept.

`attnx bench` (attnx/bench) times, measures and counts the FLOPs of attention mechanisms against the
sequence length and fits the growth exponents; this runs one of the configurations the documents cite in a
child process (wall time included) and keeps its three tables: the points (ms, MiB, FLOPs per N), the
growth exponents and the memory budget at the largest N. For prose: per case (`multi_head`, `linear`, …)
its exponents, and the first case's train ms and MiB at the largest N over each case's.

    python benchmarks/bench.py NAME [--keep DIR] [-- OPTIONS]   # NAME: default, causal, bidirectional, lm
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

SUBQUADRATIC = ["--lengths", "512,1024,2048,4096,8192", "--dim", "64", "--heads", "4", "--batch", "4",
                "--threads", "1", "--max-seconds", "60", "--max-mib", "8192"]  # fmt: skip
CONFIGS = {
    "default": [],
    "causal": ["--attention", "multi_head,linear,sliding_window", "--causal", "--encoder", "", *SUBQUADRATIC],
    "bidirectional": ["--attention", "multi_head,linear,sliding_window", "--encoder", "", *SUBQUADRATIC],
    "lm": ["--attention", "", "--encoder", "", "--lm", "multi_head,linear,sliding_window", *SUBQUADRATIC],
}
TABLES = ("points", "growth", "budget")


def case(name: str) -> str:
    """`multi_head/scaled_dot d=64 h=4 causal` and `lm (multi_head) d=64 …` are `multi_head`."""
    return re.sub(r"^lm \((.*)\)$", r"\1", name.split(" d=")[0]).split("/")[0]


def headlines(name: str, values: dict, tables: dict) -> list[dict[str, str]]:
    """The summary's rows: the sub-quadratic mechanisms' growth against softmax's, their memory budget."""
    if name == "default":
        return [{"what": "`attnx bench`: every mechanism's cost against N", "goal": "—",
                 "measured": f"{values['minutes']:.1f} min", "verdict": ""}]  # fmt: skip
    if name not in ("causal", "lm"):
        return []
    cases = [v for v in values if isinstance(values[v], dict)]
    flat = [c for c in cases if c != "multi_head"]
    k = {c: f"{values[c]['fwd_k']:.2f} / {values[c]['train_k']:.2f}" for c in cases}
    linear_in_n = all(max(values[c]["fwd_k"], values[c]["train_k"]) <= 1.2 for c in flat)
    what = "causal self-attention" if name == "causal" else "a whole decoder-only model (`--lm`)"
    found = [
        {
            "what": f"{what}: time ~ N^k (fwd / fwd+bwd), {' and '.join(flat)}",
            "goal": "k ≤ 1.2 (`multi_head` ≈ 2)",
            "measured": "; ".join(f"{c} {k[c]}" for c in [*flat, "multi_head"] if c in k),
            "verdict": common.verdict(linear_in_n),
        }
    ]
    budget = tables["budget"]
    holds = [row for row in budget["rows"] if case(row[0]) in flat]
    found.append(
        {
            "what": f"{what}: peak memory at N = {values['n']} within its budget, " + " and ".join(flat),
            "goal": "32·N·d·batch floats",
            "measured": " and ".join(f"{row[2]} of {row[3]} MiB" for row in holds),
            "verdict": common.verdict(all(row[-1] == "yes" for row in holds)),
        }
    )
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", choices=CONFIGS)
    p.add_argument("extra", nargs="*", help="after --: more `attnx bench` options (later ones win: a trial)")
    p.add_argument("--keep", type=Path, help="write bench.csv and the plots here")
    common.results_argument(p)
    args = p.parse_intermixed_args()
    common.begin()
    print(common.machine())
    out = args.keep or Path(tempfile.mkdtemp(prefix="attnx-bench-"))
    command = [sys.executable, "-m", "attnx.cli", "bench", *CONFIGS[args.name], *args.extra]
    command += ["--out", str(out)]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=common.REPO, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"attnx bench failed:\n{done.stderr[-3000:]}")
    blocks = re.findall(r"(?:^\|.*\n?)+", done.stdout, flags=re.M)
    tables = {name: common.parse_table(block) for name, block in zip(TABLES, blocks)}
    points, growth = tables["points"], tables["growth"]
    largest = max(int(row[1]) for row in points["rows"])
    at = {case(row[0]): dict(zip(points["header"], row)) for row in points["rows"] if int(row[1]) == largest}
    first = next(iter(at.values()))
    values: dict[str, object] = {"minutes": wall / 60, "n": largest}
    for row in growth["rows"]:
        fwd, train, memory = (float(v.strip("*")) for v in row[2:5])
        here = at.get(case(row[0]), {})
        values[case(row[0])] = {
            "fwd_k": fwd,
            "train_k": train,
            "memory_k": memory,
            "train_ms": float(here.get("train ms", "nan")),
            "train_mib": float(here.get("train MiB", "nan")),
            "faster": float(first["train ms"]) / float(here.get("train ms", "nan")),
            "memory_of_first": float(here.get("train MiB", "nan")) / float(first["train MiB"]),
        }
    common.record(args, tables, values, headlines(args.name, values, tables), name=f"bench.{args.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
