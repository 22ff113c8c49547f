"""Benchmark 20: what is checked before anything trains, timed in process after a warm-up (imports paid): the
preflight of a 21-job sweep (`attnx train -m attention=<7 mechanisms> seed=0,1,2`: `check_overrides`, then
`train.preflight.check_sweep`, every job composed and validated) and `attnx compare`'s checks of the full
suite (`attention=local_window`: `check_keys`, `check_runs`, `check_arms`; 5 tasks x 6 arms).

    python benchmarks/preflight.py [--repeats 5] [--before CHECKOUT]

`--before` names another checkout of attnx with its own `.venv` (`git worktree add /tmp/before COMMIT`,
then `make install` there): its timings are taken by its own Python, in a subprocess, round by round
alternating with this checkout's, so both see the same load; the table gives both medians and the speed-up.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

SWEEP = ["-m", "attention=none,fixed_c,additive,dot,multi_head,local_window,bahdanau", "seed=0,1,2"]
COMPARE = ["suite=full", "attention=local_window"]
NAMES = ("preflight of a 21-job sweep", "compare's checks of the full suite")


def preflight() -> None:
    from attnx.config.compose import check_overrides
    from attnx.train.preflight import check_sweep

    sweep = check_overrides(SWEEP)
    assert sweep is not None
    check_sweep(sweep.parsed, sweep.hydra)


def compare_checks() -> None:
    from attnx.compare import cli
    from attnx.compare.checks import check_arms, check_runs

    try:
        from attnx.compare.keys import check_keys
    except ImportError:  # a checkout from before compare's key checks had a module of their own
        from attnx.compare.checks import check_keys  # type: ignore[attr-defined,no-redef]
    from attnx.compare.plan import Arm

    request = cli.split(COMPARE)
    cfg = cli.compose_compare(request.compare)
    check_keys(cfg)
    check_runs(cfg, request.runs, "full")
    candidate = cli.candidate_arm(cfg, request.candidate)
    arms = [Arm(m, (f"attention={m}",)) for m in cfg.mechanisms if m != candidate.label] + [candidate]
    check_arms(cfg, arms, request.runs)


def timed(fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def measure_here(repeats: int) -> dict[str, list[float]]:
    """Each check `repeats` times in this process, after one warm-up of each."""
    import torch

    from attnx import registry

    torch.set_num_threads(1)
    registry.load_all()
    checks = dict(zip(NAMES, (preflight, compare_checks)))
    for fn in checks.values():
        fn()
    return {name: [timed(fn) for _ in range(repeats)] for name, fn in checks.items()}


def measure_there(checkout: Path, repeats: int) -> dict[str, list[float]]:
    """`measure_here` by another checkout's Python (its own attnx), in a subprocess."""
    python = checkout / ".venv" / "bin" / "python"
    code = f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import preflight; "
    code += f"print(json.dumps(preflight.measure_here({repeats})))"
    done = subprocess.run([str(python), "-c", code], cwd=checkout, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    import common

    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--before", type=Path, help="another attnx checkout (with its .venv), timed alternately")
    p.add_argument("--rounds", type=int, default=3, help="with --before: alternations of the two checkouts")
    args = p.parse_args()
    common.start(args)
    now: dict[str, list[float]] = {name: [] for name in NAMES}
    before: dict[str, list[float]] = {name: [] for name in NAMES}
    for _ in range(args.rounds if args.before else 1):
        if args.before:
            for name, times in measure_there(args.before, args.repeats).items():
                before[name] += times
        for name, times in measure_there(common.REPO, args.repeats).items():
            now[name] += times
    header = ["check", "seconds (median)", "min", "max"]
    rows, values = [], {}
    for i, name in enumerate(NAMES):
        median = statistics.median(now[name])
        row = [name, f"{median:.2f}", f"{min(now[name]):.2f}", f"{max(now[name]):.2f}"]
        values[f"now{i}"] = round(median, 2)
        if args.before:
            then = statistics.median(before[name])
            row += [f"{then:.2f}", f"{then / median:.1f}×"]
            values[f"before{i}"], values[f"speedup{i}"] = round(then, 2), round(then / median, 1)
        rows.append(row)
    if args.before:
        header += ["before (median)", "speed-up"]
        values["before_commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=args.before, capture_output=True, text=True
        ).stdout.strip()
    headlines = [
        {
            "what": f"{name}, in process",
            "goal": "≥ 3× faster than before",
            "measured": f"{values.get(f'speedup{i}', '–')}× ({values[f'now{i}']:.2f} s)",
            "verdict": common.verdict(values.get(f"speedup{i}", 0) >= 3),
        }
        for i, name in enumerate(NAMES)
    ]
    common.record(args, {"checks": common.table(header, rows, right_from=1)}, values, headlines)


if __name__ == "__main__":
    sys.exit(main())
