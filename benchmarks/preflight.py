"""Benchmark 20: what is checked before anything trains, timed in process after one warm-up (imports paid):
the preflight of a 21-job sweep (`attnx train -m attention=<7 mechanisms> seed=0,1,2`: `check_overrides`
then `train.preflight.check_sweep`, every job composed and validated) and `attnx compare`'s checks of the
full suite (`attention=local_window`: `check_keys`, `check_runs`, `check_arms`, 5 tasks x 6 arms).

    python benchmarks/preflight.py [--repeats 5]

The figure of a change is the ratio of two checkouts' medians, each run alternately on the same machine
(the script only times the functions both versions have, ignoring what they return).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import common

SWEEP = ["-m", "attention=none,fixed_c,additive,dot,multi_head,local_window,bahdanau", "seed=0,1,2"]
COMPARE = ["suite=full", "attention=local_window"]


def preflight() -> None:
    from attnx.config.compose import check_overrides
    from attnx.train.preflight import check_sweep

    sweep = check_overrides(SWEEP)
    assert sweep is not None
    check_sweep(sweep.parsed, sweep.hydra)


def compare_checks() -> None:
    from attnx.compare import cli
    from attnx.compare.checks import check_arms, check_keys, check_runs
    from attnx.compare.plan import Arm

    request = cli.split(COMPARE)
    cfg = cli.compose_compare(request.compare)
    check_keys(cfg)
    check_runs(cfg, request.runs, "full")
    candidate = cli.candidate_arm(cfg, request.candidate)
    arms = [Arm(m, (f"attention={m}",)) for m in cfg.mechanisms if m != candidate.label] + [candidate]
    check_arms(cfg, arms, request.runs)


def timed(fn: Callable[[], None], repeats: int) -> list[float]:
    fn()  # warm-up: imports, Hydra's first initialisation
    found = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        found.append(time.perf_counter() - started)
    return found


def main() -> None:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    common.start(args)
    from attnx import registry

    registry.load_all()
    for name, fn in (("preflight, 21-job sweep", preflight), ("compare checks, full suite", compare_checks)):
        times = timed(fn, args.repeats)
        print(f"{name}: median {statistics.median(times):.2f} s (min {min(times):.2f}, max {max(times):.2f})")


if __name__ == "__main__":
    main()
