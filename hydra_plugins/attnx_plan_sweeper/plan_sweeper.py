"""A Hydra sweeper that runs the jobs a plan file lists: `hydra/sweeper=plan hydra.sweeper.plan=FILE`, or
an experiment config's `hydra.sweeper.plan` given inline as the list itself.

Hydra's basic sweeper takes the cartesian product of the command line's comma lists, so a study whose
runs differ in several keys at once (each mechanism with its own hyperparameters, its own tuned
learning rate) cannot be one sweep there. A plan is a YAML list of jobs, each a list of overrides;
every plan job is crossed with the command line's own sweeps (`seed=0,1,2`) and shares its other
overrides. Jobs are numbered plan item by plan item, so job N of a plan is the same run on every
launch, and `resume=auto` finds it in `<sweep dir>/N`. Launchers (basic, joblib, submitit) are
Hydra's, unchanged. `attnx compare` writes its plans; any sweep can use one.

Lives in the `hydra_plugins` namespace because Hydra instantiates only the plugins it discovers there.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.plugins import Plugins
from hydra.errors import HydraException
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, ListConfig, OmegaConf


def read_plan(plan: Any) -> list[list[str]]:
    """The jobs of a plan: a YAML (or JSON) file's, or a list given inline (an experiment config's
    `hydra.sweeper.plan`, which then travels with the package); a HydraException naming the plan when it is
    not a non-empty list of lists of strings (an empty plan would launch nothing and say nothing)."""
    if isinstance(plan, (str, Path)):
        where = f"hydra.sweeper.plan={plan}"
        try:
            jobs = OmegaConf.load(plan)
        except Exception as error:
            said = " ".join(str(error).split())  # YAML's parse errors span lines: the user sees one
            raise HydraException(f"{where}: cannot read it ({said})") from error
    else:
        where = "hydra.sweeper.plan (inline)"
        jobs = plan if isinstance(plan, ListConfig) else OmegaConf.create(plan)
    if not isinstance(jobs, ListConfig) or not all(
        isinstance(job, ListConfig) and all(isinstance(o, str) for o in job) for job in jobs
    ):
        raise HydraException(f"{where}: must be a list of jobs, each a list of overrides")
    if not jobs:
        raise HydraException(f"{where}: lists no jobs")
    return [list(job) for job in jobs]


def plan_jobs(plan: list[list[str]], arguments: list[Override]) -> list[list[str]]:
    """Each plan job crossed with the command line's sweeps, plan job by plan job: job N of the sweep
    is `jobs[N]` (attnx.train.preflight checks the same list before the launch)."""
    (crossed,) = BasicSweeper.split_arguments(arguments, None)
    return [[*common, *job] for job in plan for common in crossed]


class PlanSweeper(Sweeper):
    def __init__(self, plan: Any, max_batch_size: int | None = None) -> None:
        self.plan = plan
        self.max_batch_size = max_batch_size
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def jobs(self, arguments: list[str]) -> list[list[str]]:
        """`plan_jobs` of this sweeper's plan and the command line's task overrides."""
        assert self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        return plan_jobs(read_plan(self.plan), parser.parse_overrides(arguments))

    def sweep(self, arguments: list[str]) -> Sequence[Any]:
        assert self.config is not None and self.launcher is not None
        jobs = self.jobs(arguments)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        size = self.max_batch_size or len(jobs) or 1
        returns = []
        for start in range(0, len(jobs), size):
            batch = jobs[start : start + size]
            self.validate_batch_is_legal(batch)
            results = self.launcher.launch(batch, initial_job_idx=start)
            for result in results:
                _ = result.return_value  # raises a job's error, as the basic sweeper does
            returns.append(results)
        return returns
