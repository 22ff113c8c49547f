"""Every job of a sweep composed and checked before any is launched (`check_sweep`, called by
`attnx.config.compose.check_overrides`): a value that fails validation in one job stops the whole sweep with
one line naming the job and the key (exit 2), rather than failing that run after the others started.

The jobs are those the sweeper will launch, numbered as their folders `<sweep dir>/N` will be: Hydra's
BasicSweeper takes the product of the command line's sweeps; the plan sweeper crosses its file's jobs
with that product (`plan_jobs`). A sweeper that draws values while it runs (Optuna) is checked on what
is known before: its fixed overrides with each value of its choices and ranges and both bounds of its
intervals, one job per value (`covering_jobs`). A value drawn inside an interval, and a combination
of drawn values, are checked by its trial when it runs.

Each job gets what a run checks before it builds any data: `attnx.config.validation.validate`, the task's
constructor among it (its own argument checks: `task.min_len <= task.max_len`). The jobs share one Hydra
initialisation and what it loads (`attnx.config.session`); `validate` imports Lightning once, for the
Trainer's signature.
"""

from __future__ import annotations

import copy
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from attnx import registry
from attnx.config.compose import (
    CONF_DIR,
    SLURM_LAUNCHER,
    ConfigError,
    check_missing,
    check_slurm_tasks,
    covering_jobs,
    one_line,
    renamed_sections,
    search_path_override,
)
from attnx.config.resolved import ResolvedRun
from attnx.config.session import session

BASIC = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
PLAN = "hydra_plugins.attnx_plan_sweeper.plan_sweeper.PlanSweeper"
# what a job's own checks raise for a config the user can fix (attnx.train.run._run says the same)
USER_ERRORS = (ConfigError, ValueError, registry.RegistryError, OmegaConfBaseException)


def check_sweep(parsed: list[Any], hydra_cfg: DictConfig) -> None:
    """Compose and check every job of the sweep that the command line's overrides (`parsed`) and its
    first job's `hydra` node describe; a ConfigError naming the first job that fails, and why."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    with session(CONF_DIR):
        # with the config loader: a glob of a group's options (`attention=glob(*)`) lists them
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        shared = [*(o.input_line for o in parsed if o.is_hydra_override()), *search_path_override()]
        task = parser.parse_overrides([o.input_line for o in parsed if not o.is_hydra_override()])
        jobs, complete = sweep_jobs(task, hydra_cfg.sweeper, parser)
        directions = hydra_cfg.sweeper.get("direction")  # Optuna's, one per objective
        for direction in directions if isinstance(directions, ListConfig) else [directions]:
            if direction is not None and str(direction).lower() not in ("minimize", "maximize"):
                raise ConfigError(f"hydra.sweeper.direction={direction}: must be minimize or maximize")
        composed = Composed(shared, parser)
        for number, job in enumerate(jobs):
            try:
                cfg = composed.job(job)
            except Exception as error:  # Hydra's own: an unknown key, a wrong type, a missing option
                raise ConfigError(f"{_label(number, job, jobs, complete)}: {one_line(error)}") from None
            try:
                run = check_job(cfg)
                if not complete and number == 0:
                    check_search(run)
            except USER_ERRORS as error:
                raise ConfigError(f"{_label(number, job, jobs, complete)}: {one_line(error)}") from None


class Composed:
    """The jobs' configs, composed once per set of config group choices: jobs that differ only in values
    (`seed=0,1,2`, `optim.lr=...`) share one Hydra composition, a copy of which takes each job's values as
    Hydra applies command-line values after composing (`ConfigLoaderImpl._apply_overrides_to_config`).
    A sweep of 7 mechanisms over 3 seeds composes 7 times, not 21. An override that may choose a
    group's option (a key without a dot that names a config group, `+`/`~` of one, a package `@`) is part of
    what a composition is for: telling a value from a group wrongly could only compose more often."""

    def __init__(self, shared: list[str], parser: Any) -> None:
        self.shared, self.parser = shared, parser
        self.found: dict[tuple[str, ...], DictConfig] = {}
        self.groups: dict[str, bool] = {}

    def job(self, overrides: list[str]) -> DictConfig:
        import hydra
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        parsed = self.parser.parse_overrides(overrides)
        values = [o for o in parsed if self._is_value(o)]
        chosen = tuple(o.input_line for o in parsed if not self._is_value(o))
        if chosen not in self.found:
            self.found[chosen] = hydra.compose("train", [*self.shared, *chosen], return_hydra_config=True)
        cfg = copy.deepcopy(self.found[chosen])
        ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
        return cfg

    def _is_value(self, override: Any) -> bool:
        key = override.key_or_group
        if override.package is not None or override.is_delete() or "/" in key:
            return False
        if "." in key:
            return True
        if key not in self.groups:  # inside check_sweep's Hydra initialisation: its loader knows the groups
            from hydra.core.global_hydra import GlobalHydra

            loader = GlobalHydra.instance().config_loader()
            options = loader.get_group_options(key, config_name="train", overrides=search_path_override())
            self.groups[key] = bool(options)
        return not self.groups[key]


def sweep_jobs(task: list[Any], sweeper: DictConfig, parser: Any) -> tuple[list[list[str]], bool]:
    """The task overrides of each job that `sweeper` will launch, and whether these are all of them
    (False: the sweeper draws values as it runs, and these cover the ones known before)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.errors import HydraException

    from hydra_plugins.attnx_plan_sweeper.plan_sweeper import plan_jobs, read_plan

    target = sweeper.get("_target_")
    try:
        if target == BASIC:
            (jobs,) = BasicSweeper.split_arguments(task, None)
            return jobs, True
        if target == PLAN:
            if OmegaConf.is_missing(sweeper, "plan"):
                raise ConfigError("hydra.sweeper.plan is not set: name the plan, hydra.sweeper.plan=FILE")
            return plan_jobs(read_plan(sweeper.plan), task), True
    except HydraException as error:  # a sweep type the sweeper cannot expand; an unreadable plan
        raise ConfigError(one_line(error)) from None
    given = {o.key_or_group for o in task}
    space = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items() if key not in given]
    known = [_with_bounds(o) for o in [*task, *parser.parse_overrides(space)]]
    return covering_jobs(parser.parse_overrides(known)), False


def check_job(cfg: DictConfig) -> ResolvedRun:
    """What a job checks before it builds its data (`attnx.config.validation.validate`, the task's own
    arguments among it), on its config composed with the `hydra` node (which the job's own config
    lacks). A SLURM job's accelerator is its node's to have, not this machine's."""
    from attnx.config.validation import validate

    renamed_sections(cfg)
    check_missing(cfg)
    check_slurm_tasks(cfg)
    here = cfg.hydra.launcher.get("_target_") != SLURM_LAUNCHER
    with open_dict(cfg):
        del cfg["hydra"]
    return validate(cfg, here)


def check_search(run: ResolvedRun) -> None:
    """What a sweeper that steers by each run's result (Optuna) needs, which would otherwise fail every
    trial after it trained: an `optimized_metric` the runs log (their validation metrics, and the same
    at test), as the run's model type and task declare them."""
    known = [*run.logged("test"), *run.logged("val")]
    if run["optimized_metric"] not in known:
        raise ConfigError(
            f"optimized_metric={run['optimized_metric']}: task {run['task']['name']} logs no such metric; "
            f"it logs {', '.join(known)}"
        )


def _with_bounds(override: Any) -> str:
    """An interval (`interval(1e-4, 1e-2)`, tagged or cast) as the choice of its two bounds."""
    from hydra.core.override_parser.types import ValueType

    if override.value_type != ValueType.INTERVAL_SWEEP:
        return override.input_line
    interval = override.value()
    return f"{override.get_key_element()}=choice({interval.start},{interval.end})"


def _label(number: int, job: list[str], jobs: list[list[str]], complete: bool) -> str:
    """A job by its number (its folder in the sweep) and what sets it apart from the others."""
    own = [o for o in job if any(o not in other for other in jobs)] or job
    return f"job {number} ({' '.join(own)})" if complete else f"a trial with {' '.join(own)}"
