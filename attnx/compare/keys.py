"""`attnx compare`'s own keys and its suite's, in range and naming what exists (`check_keys`): what Hydra's
types let through (an empty or negative learning-rate grid, repeated seeds, `bench.n=0`, an unknown
mechanism, an unwritable store). Each error is one ConfigError naming the key and what is allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from attnx import registry
from attnx.compare.scores import SELECTIONS
from attnx.config.compose import ConfigError, check_choice, file_in_the_way, group_options


def check_keys(cfg: DictConfig) -> None:
    """compare.yaml's keys and the suite's, in range and naming what exists: what Hydra's types let
    through (an empty or negative learning-rate grid, repeated seeds, `bench.n=0`, an unknown mechanism).
    `seeds` given as a count becomes the list it names (`seed_list`)."""
    cfg.seeds = seed_list(cfg.seeds)
    if not cfg.mechanisms:
        raise ConfigError("mechanisms is empty: a comparison needs at least one")
    attention = registry.registry("attention")
    try:
        mechanisms = [attention.canonical(name) for name in cfg.mechanisms]
    except registry.RegistryError as error:
        raise ConfigError(f"mechanisms: {error}") from None
    _once("mechanisms", list(cfg.mechanisms), mechanisms)
    if cfg.baseline not in cfg.mechanisms:
        raise ConfigError(f"baseline={cfg.baseline} is not one of mechanisms={list(cfg.mechanisms)}")
    try:
        attention.canonical(cfg.score_host)
    except registry.RegistryError as error:
        raise ConfigError(f"score_host: {error}") from None
    launchers = group_options({"hydra/launcher"}).get("hydra/launcher", [])
    try:
        check_choice("hydra/launcher", cfg.launcher, launchers)
    except ConfigError as error:
        raise ConfigError(f"launcher: {error}") from None
    _check_protocol(cfg.protocol)
    if cfg.pareto not in PARETO:
        raise ConfigError(f"pareto={cfg.pareto}: must be one of {', '.join(PARETO)}")
    for key in ("n", "dim", "heads"):
        if cfg.bench[key] < 1:
            raise ConfigError(f"bench.{key}={cfg.bench[key]}: must be a positive integer")
    if cfg.bench.dim % cfg.bench.heads:
        raise ConfigError(f"bench.heads={cfg.bench.heads} must divide bench.dim={cfg.bench.dim}")
    if cfg.out is not None:
        _check_folder(Path(cfg.out))
    _check_store(cfg.store)
    if cfg.budget_cap < 1:
        raise ConfigError(
            f"budget_cap={cfg.budget_cap}: the most budgets a run still improving trains for: >= 1 "
            "(1: no continuation)"
        )
    if cfg.verify < 0 or (cfg.verify and cfg.store is None):
        raise ConfigError(f"verify={cfg.verify}: a count (>= 0) of stored runs to train again; needs a store")
    _check_discrimination(cfg.discrimination)
    _check_verdicts(cfg)
    _check_suite_tasks(cfg)


MAX_SEEDS = 64  # a count beyond this is a typo, not a plan: 10 give the candidate's 5 comparisons p < 0.01
FAMILIES = {"task": "cell", "suite": "all"}  # `family` -> where Holm's family ends (attnx.report.verdicts)
SEED_LIMIT = 2**32  # numpy's and Lightning's seeds are unsigned 32-bit integers


def seed_list(given: Any) -> list[int]:
    """`seeds` as the seeds it names: a count n is 0..n-1 (1 <= n <= MAX_SEEDS); a list, its seeds, each an
    integer in [0, SEED_LIMIT) and none repeated."""
    if isinstance(given, int) and not isinstance(given, bool):
        if not 1 <= given <= MAX_SEEDS:
            raise ConfigError(
                f"seeds={given}: a count must be within 1..{MAX_SEEDS} (or list them: seeds=[0,1,2])"
            )
        return list(range(given))
    if not isinstance(given, Sequence) or isinstance(given, str):
        raise ConfigError(f"seeds={given}: give a count (seeds=8) or a list of seeds (seeds=[0,1,2])")
    seeds = list(given)
    if not seeds:
        raise ConfigError("seeds is empty: a comparison needs at least one")
    wrong = next(
        (s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < SEED_LIMIT), None
    )
    if wrong is not None:
        raise ConfigError(f"seeds={seeds}: {wrong} is no seed (each an integer in [0, 2**32))")
    _once("seeds", seeds, seeds)
    return seeds


def _check_store(store: str | None) -> None:
    """The run store's folder can be made and written into (`store=null`: no store)."""
    from attnx.store.runs import root_of
    from attnx.track.results import unwritable

    root = root_of(store)
    why = None if root is None else unwritable(root)
    if why is not None:
        raise ConfigError(f"store={store}: cannot write to {root} ({why}); give store=DIR or store=null")


def _check_discrimination(rule: DictConfig) -> None:
    """0 < ceiling_fraction <= 1 and 0 <= spread <= 1: a share of the ceiling, and a span of a 0-1 metric."""
    if not 0 < rule.ceiling_fraction <= 1:  # `not`: nan too
        raise ConfigError(f"discrimination.ceiling_fraction={rule.ceiling_fraction}: must be in (0, 1]")
    if not 0 <= rule.spread <= 1:
        raise ConfigError(f"discrimination.spread={rule.spread}: must be in [0, 1]")


def _check_verdicts(cfg: DictConfig) -> None:
    """0 < alpha < 1, and `family` one of FAMILIES."""
    if not 0 < cfg.alpha < 1:  # `not`: nan too
        raise ConfigError(f"alpha={cfg.alpha}: must be in (0, 1), e.g. alpha=0.05")
    if cfg.family not in FAMILIES:
        raise ConfigError(f"family={cfg.family}: must be one of {', '.join(FAMILIES)}")


def _once(key: str, given: list[Any], names: list[Any]) -> None:
    """Each of `names` (the canonical forms of `given`) once: a repeated seed or mechanism would train
    the same runs twice and count them as two."""
    repeated = next((g for g, n in zip(given, names) if names.count(n) > 1), None)
    if repeated is not None:
        raise ConfigError(f"{key}={given}: {repeated} is repeated; name each once")


def _check_protocol(protocol: DictConfig) -> None:
    grid = list(protocol.lr_grid)
    if not grid:
        raise ConfigError("protocol.lr_grid is empty: list the learning rates protocol.lr_search tries")
    wrong = next((lr for lr in grid if not lr > 0), None)  # `not >`: nan too
    if wrong is not None:
        raise ConfigError(f"protocol.lr_grid={grid}: {wrong} is no learning rate (each must be > 0)")
    _once("protocol.lr_grid", grid, grid)
    for key in ("param_tolerance", "state_tolerance"):
        if not protocol[key] >= 0:
            raise ConfigError(f"protocol.{key}={protocol[key]}: must be >= 0 (0.1: within ±10%)")
    _check_grid(protocol.grid)
    # each pair chooses the same thing twice: the rate (lr_search, grid) or the widths (params, state)
    for one, other in (("lr_search", "grid.enabled"), ("match_params", "match_state")):
        if OmegaConf.select(protocol, one) and OmegaConf.select(protocol, other):
            raise ConfigError(
                f"protocol.{one}=true and protocol.{other}=true both choose the "
                f"{'learning rate' if one == 'lr_search' else 'widths'}; set one of them"
            )


PARETO = ("time", "state")  # the Pareto view's third cost: bench's inference ms, or decoding state bytes
SITES = ("encoder", "decoder")  # the hosts with attention slots a suite task's arms may fill


def _check_grid(grid: DictConfig) -> None:
    """MAD's grid: at least one point on each axis, learning rates > 0, weight decays >= 0, each once."""
    for key, ok, limit in (("lr", lambda v: v > 0, "> 0"), ("weight_decay", lambda v: v >= 0, ">= 0")):
        values = list(grid[key])
        if not values:
            raise ConfigError(f"protocol.grid.{key} is empty: list at least one value ({limit})")
        wrong = next((v for v in values if not ok(v)), None)  # `not ok`: nan too
        if wrong is not None:
            raise ConfigError(f"protocol.grid.{key}={values}: {wrong} is out of range (each must be {limit})")
        _once(f"protocol.grid.{key}", values, values)
    if grid.select not in SELECTIONS:
        raise ConfigError(f"protocol.grid.select={grid.select}: must be one of {', '.join(SELECTIONS)}")


def _check_folder(out: Path) -> None:
    """`out` is a folder, or can be made one: no file in its place or above it."""
    blocked = file_in_the_way(out)
    if blocked is not None:
        raise ConfigError(f"out={out}: {blocked} is a file, not a folder")


def _check_suite_tasks(cfg: DictConfig) -> None:
    """Each suite task has its overrides and a metric; under `protocol.match_params` its width keys too.
    (That the metric rises and has a ceiling is its declaration's to say: `_check_task`.)"""
    if not cfg.tasks:
        raise ConfigError("the suite names no tasks")
    for name, spec in cfg.tasks.items():
        needed = ["overrides", "metric", *(["width"] if cfg.protocol.match_params else [])]
        for key in needed:
            if OmegaConf.is_missing(spec, key) or not spec[key]:
                raise ConfigError(f"suite task {name}: no {key}; {TASK_KEYS[key]}")
        if spec.site is not None and spec.site not in SITES:
            raise ConfigError(
                f"suite task {name}: site={spec.site}: must be null or one of {', '.join(SITES)}"
            )
        if spec.capability is not None and not spec.capability.strip():
            raise ConfigError(f"suite task {name}: capability is empty; name it, or null for the task's own")
        if spec.get("baseline") is not None and spec.baseline not in cfg.mechanisms:
            raise ConfigError(
                f"suite task {name}: baseline={spec.baseline} is not one of mechanisms={list(cfg.mechanisms)}"
            )
        ceiling = spec.get("ceiling")
        if ceiling is not None and not ceiling > 0:
            raise ConfigError(f"suite task {name}: ceiling={ceiling}: must be > 0")


TASK_KEYS = {
    "overrides": "give the `attnx train` overrides that set it up, e.g. overrides: [task=reverse]",
    "metric": "name the test metric compared, e.g. metric: test/exact_match",
    "width": "protocol.match_params and match_state scale its width keys, e.g. width: [encoder.hidden_dim]",
}
