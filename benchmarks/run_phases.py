"""Benchmark 14: where a quick-suite run's wall time goes outside training, phase by phase.

Each task of conf/suite/quick.yaml runs as `attnx compare` runs it (the suite's overrides, its
mechanism: `additive`, `multi_head` on mqar; `paired_embeddings=true`, `resume=auto`) in a fresh Python
process: one 3-job multirun (PLAN: seeds 1 and 2 without attention maps, seed 0 with the maps compare
draws) through `attnx.train.cli.main(["-m", ...])` on Hydra's basic launcher, so the same process runs
every job, as a joblib worker runs many. The first job pays what a process pays once (lazy imports,
first calls); the second is what every later run of a worker costs. Phases are timed by wrapping the
functions attnx calls; a phase nested in another is subtracted from it, so the rows add up to the wall.

    python benchmarks/run_phases.py [--tasks reverse mqar]  # default: every task of the quick suite

`training` is `module.train_seconds` (Lightning's `on_train_start` to `on_train_end`) less the in-fit
validation and checkpoint writes inside it; `fixed cost` = run wall − `module.train_seconds`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Any

STARTED = time.perf_counter()  # before any import of attnx, torch or Lightning

SUITE = Path(__file__).resolve().parents[1] / "conf" / "suite" / "quick.yaml"
ATTENTION = {"mqar": "multi_head"}  # the rest run additive, the quick suite's classic mechanism
PHASES = [
    ("compose", "Hydra composes the job's config"),
    ("hydra job", "Hydra's job set-up around the task function (folders, logging)"),
    ("lock+config", "the run lock, .hydra/ config files"),
    ("results.json", "every write of results.json"),
    ("validate config", "attnx.config.validation.validate"),
    ("data", "task.setup(): generating the splits"),
    ("model", "the LightningModule"),
    ("trainer", "the Trainer: callbacks, loggers, plugins"),
    ("assemble, other", "seeding, threads, checks"),
    ("resume scan", "resume=auto: newest_good over checkpoints/"),
    ("logger start", "start_logging: hparams to the loggers"),
    ("fit set-up", "trainer.fit outside training, validation and the sanity check: set-up, teardown"),
    ("sanity check", "the validation steps Lightning runs before training (num_sanity_val_steps)"),
    ("training", "module.train_seconds less the fit's validation, checkpoint writes and maps"),
    ("fit validation", "the validation epochs inside fit"),
    ("checkpoint writes", "Trainer.save_checkpoint: state dict, torch.save, write, checksum"),
    ("final validate", "trainer.validate on the best checkpoint (its load included)"),
    ("test", "trainer.test on the best checkpoint (its load included)"),
    ("maps in fit", "AttentionHeatmaps.draw every 4th validation epoch (the maps job only)"),
    ("maps at test", "AttentionHeatmaps.draw at test end (the maps job only)"),
    ("logger finish", "finish_logging"),
    ("run, other", "the rest of attnx.train.run.train"),
]
NAMES = {name for name, _ in PHASES}
# the jobs, in this order, as `attnx compare` plans them (attnx.compare.plan.heatmap_overrides): the first
# two draw no attention maps, as two of a task's three seeds; the third draws the first seed's
PLAN = [
    ["seed=1", "callbacks.attention_heatmaps=null"],
    ["seed=2", "callbacks.attention_heatmaps=null"],
    ["seed=0", "callbacks.attention_heatmaps.num_examples=1", "callbacks.attention_heatmaps.heads=mean"],
]
COLUMNS = ["1st", "2nd", "maps"]
ONCE = [  # paid once per process or per multirun, not per run
    ("imports", "interpreter start, imports (torch, Lightning, Hydra, matplotlib, attnx): once per process"),
    (
        "sweep set-up",
        "attnx.train.cli.main before and after its jobs: preflight, launcher: once per multirun",
    ),
]


class Clock:
    """Seconds per phase of the current job; a phase timed inside another is subtracted from it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._stack: list[list[float]] = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._stack.append([0.0])
        started = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - started
            nested = self._stack.pop()[0]
            self.seconds[name] += spent - nested
            if self._stack:
                self._stack[-1][0] += spent

    def wrap(self, owner: Any, attribute: str, name: str | Callable[..., str]) -> None:
        """Time every call of `owner.attribute` as phase `name` (or `name(*args)`, chosen per call)."""
        original = getattr(owner, attribute)

        @wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name(*args) if callable(name) else name):
                return original(*args, **kwargs)

        setattr(owner, attribute, timed)


def quick_overrides(task: str) -> list[str]:
    from omegaconf import OmegaConf

    suite = OmegaConf.load(SUITE)
    attention = ATTENTION.get(task, "additive")
    return [*suite.tasks[task].overrides, f"attention={attention}", "paired_embeddings=true", "resume=auto"]


def instrument(clock: Clock, jobs: list[dict[str, float]]) -> None:
    """Wrap the functions a run calls; each finished job's phases are appended to `jobs`."""
    import hydra._internal.config_loader_impl as loader
    import hydra.core.utils as basic  # the launcher imports run_job from there as Hydra loads it
    from lightning.pytorch import Trainer
    from lightning.pytorch.loops.evaluation_loop import _EvaluationLoop

    import attnx.lit
    import attnx.track.loggers as loggers
    import attnx.track.results as results
    import attnx.train.assemble as assemble
    import attnx.train.cli as cli
    import attnx.train.run as run
    from attnx import registry
    from attnx.lit import checkpoints
    from attnx.track.heatmaps import AttentionHeatmaps
    from attnx.track.lock import RunLock

    clock.wrap(loader.ConfigLoaderImpl, "load_sweep_config", "compose")
    clock.wrap(basic, "run_job", "hydra job")
    clock.wrap(cli, "train", "run, other")
    clock.wrap(RunLock, "acquire", "lock+config")
    clock.wrap(run, "_save_config", "lock+config")
    clock.wrap(results, "write_results", "results.json")
    clock.wrap(run, "assemble", "assemble, other")
    clock.wrap(run, "validate", "validate config")
    clock.wrap(assemble, "_trainer", "trainer")
    clock.wrap(checkpoints, "newest_good", "resume scan")
    clock.wrap(loggers, "start_logging", "logger start")
    clock.wrap(loggers, "finish_logging", "logger finish")
    clock.wrap(Trainer, "fit", "fit set-up")
    clock.wrap(Trainer, "save_checkpoint", "checkpoint writes")
    clock.wrap(Trainer, "validate", "final validate")
    clock.wrap(Trainer, "test", "test")
    clock.wrap(
        AttentionHeatmaps,
        "draw",
        lambda _, trainer, *__: f"maps {'in fit' if _in_fit(trainer) else 'at test'}",
    )
    clock.wrap(_EvaluationLoop, "run", lambda loop: _evaluation(loop.trainer))
    build, lit_module, run_job = registry.build, attnx.lit.lit_module, basic.run_job
    built: dict[str, Any] = {}

    def build_timed(kind: str, *args: Any, **kwargs: Any) -> Any:
        made = build(kind, *args, **kwargs)
        if kind == "task":
            clock.wrap(made, "setup", "data")
        return made

    def lit_module_kept(*args: Any, **kwargs: Any) -> Any:
        with clock.phase("model"):
            built["module"] = lit_module(*args, **kwargs)
        return built["module"]

    def job(*args: Any, **kwargs: Any) -> Any:
        try:
            return run_job(*args, **kwargs)
        finally:
            jobs.append(finish(dict(clock.seconds), built.pop("module", None)))
            clock.seconds.clear()

    registry.build, attnx.lit.lit_module, basic.run_job = build_timed, lit_module_kept, job


def _in_fit(trainer: Any) -> bool:
    return bool(trainer.state.fn == "fit")


def _evaluation(trainer: Any) -> str:
    """The phase an evaluation loop belongs to: validate's and test's are theirs."""
    if trainer.state.fn == "fit":
        return "sanity check" if trainer.sanity_checking else "fit validation"
    return "final validate" if trainer.state.fn == "validate" else "test"


def finish(seconds: dict[str, float], module: Any) -> dict[str, float]:
    """A job's phases, with `training` (train_seconds less what the fit's phases inside it took) taken
    out of `fit set-up`."""
    train = getattr(module, "train_seconds", 0.0)
    seconds["train_seconds"] = train
    inside = ("fit validation", "checkpoint writes", "maps in fit")
    seconds["training"] = train - sum(seconds.get(name, 0.0) for name in inside)
    seconds["fit set-up"] = seconds.get("fit set-up", 0.0) - seconds["training"]
    return seconds


def child(task: str) -> None:
    """One task's 2-job multirun in this process; prints the per-job phases as JSON."""
    import lightning.pytorch  # noqa: F401
    from omegaconf import OmegaConf

    import attnx.lit.classifier  # noqa: F401
    import attnx.lit.lm  # noqa: F401
    import attnx.lit.seq2seq  # noqa: F401
    import attnx.track.loggers  # noqa: F401
    import attnx.train.run  # noqa: F401
    from attnx import registry
    from attnx.train.cli import main

    registry.load_all()
    imports = time.perf_counter() - STARTED
    clock = Clock()
    jobs: list[dict[str, float]] = []
    instrument(clock, jobs)
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "plan.yaml"
        OmegaConf.save(OmegaConf.create(PLAN), plan)
        sweep = [
            "hydra/launcher=basic",
            "hydra/sweeper=plan",
            f"hydra.sweeper.plan={plan}",
            f"hydra.sweep.dir={tmp}",
        ]
        started = time.perf_counter()
        code = main(["-m", *sweep, *quick_overrides(task)])
        sweep_wall = time.perf_counter() - started
    jobs[0]["imports"] = imports
    jobs[0]["sweep set-up"] = sweep_wall - sum(sum(v for k, v in j.items() if k in NAMES) for j in jobs)
    print(json.dumps({"code": code, "jobs": jobs}))


def measure(task: str) -> list[dict[str, float]]:
    argv = [sys.executable, __file__, "--child", task]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{task}: failed\n{done.stderr[-3000:]}")
    out = done.stdout
    result = json.loads(out.strip().splitlines()[-1])
    if result["code"] != 0:
        raise SystemExit(f"{task}: the multirun failed (exit {result['code']})")
    jobs: list[dict[str, float]] = result["jobs"]
    return jobs


def table(measured: dict[str, list[dict[str, float]]]) -> tuple[list[str], list[list[Any]]]:
    columns = [(task, i) for task in measured for i in range(len(PLAN))]
    header = ["phase (s)", *(f"{task} {COLUMNS[i]}" for task, i in columns)]
    rows = [[f"{name}", *(measured[t][i].get(name, 0.0) for t, i in columns)] for name, _ in PHASES]
    walls = [sum(measured[t][i].get(name, 0.0) for name, _ in PHASES) for t, i in columns]
    trained = [measured[t][i]["train_seconds"] for t, i in columns]
    rows.append(["**run wall**", *walls])
    rows.append(["train_seconds", *trained])
    rows.append(["**fixed cost** (wall − train_seconds)", *(w - s for w, s in zip(walls, trained))])
    rows += [[f"*{name}*", *(measured[t][i].get(name, "") for t, i in columns)] for name, _ in ONCE]
    return header, rows


def fixed_cost(job: dict[str, float]) -> float:
    return sum(job.get(name, 0.0) for name, _ in PHASES) - job["train_seconds"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", help="tasks of the quick suite (default: all of them)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--results", type=Path, help="results file (default: benchmarks/results/run_phases.json)")
    args = p.parse_args()
    if args.child:
        child(args.child)
        return
    import common
    from omegaconf import OmegaConf

    common.begin()
    print(common.machine())
    tasks = args.tasks or list(OmegaConf.load(SUITE).tasks)
    measured = {task: measure(task) for task in tasks}
    later = {task: jobs[1] for task, jobs in measured.items()}  # what most runs of a worker cost
    values = {
        "fixed_low": min(map(fixed_cost, later.values())),
        "fixed_high": max(map(fixed_cost, later.values())),
        "share_low": min(fixed_cost(j) / sum(j.get(n, 0.0) for n, _ in PHASES) for j in later.values()),
        "share_high": max(fixed_cost(j) / sum(j.get(n, 0.0) for n, _ in PHASES) for j in later.values()),
        "imports_low": min(jobs[0]["imports"] for jobs in measured.values()),
        "imports_high": max(jobs[0]["imports"] for jobs in measured.values()),
    }
    phases = common.table(["phase", "what"], [*PHASES, *ONCE])
    tables = {"phases": common.table(*table(measured)), "what": phases}
    common.record(args, tables, values)


if __name__ == "__main__":
    main()
