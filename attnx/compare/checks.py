"""What `attnx compare` checks before anything trains; each error is one ConfigError naming the key, value
or file. Its own keys and the suite's (`check_keys`), the run overrides of the command line against what
the suite and the protocol set (`check_runs`), and each arm on each suite task (`check_arms`): the
composed config validates, the task's metric is one its runs log, its width keys exist, and its data fits
the models' `max_len`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from omegaconf import DictConfig, OmegaConf

from attnx import registry
from attnx.cli import Needs, unmet
from attnx.compare.plan import WEIGHT_DECAY, Arm
from attnx.compare.scores import SELECTIONS
from attnx.config.compose import (
    CONF_DIR,
    ConfigError,
    check_choice,
    check_group_choices,
    check_slot_overrides,
    compose,
    file_in_the_way,
    group_options,
)
from attnx.config.resolved import ResolvedRun
from attnx.config.session import session


class Given(NamedTuple):
    """What an option of compare's may act with: the composed config, and the candidate's keys."""

    cfg: DictConfig
    candidate: set[str]  # the keys naming it: `attention`, `score` or both


def _protocol(flag: str) -> Callable[[Given], bool]:
    return lambda given: bool(OmegaConf.select(given.cfg.protocol, flag))


# compare's keys that act only with another (`attnx.cli.Needs`): given alone on the command line, refused
GRID = "is an axis of MAD's grid"
NEEDS = (
    Needs(
        "protocol.lr_grid",
        "is what protocol.lr_search tries",
        "protocol.lr_search=true",
        _protocol("lr_search"),
    ),
    Needs("protocol.grid.lr", GRID, "protocol.grid.enabled=true", _protocol("grid.enabled")),
    Needs("protocol.grid.weight_decay", GRID, "protocol.grid.enabled=true", _protocol("grid.enabled")),
    Needs(
        "protocol.grid.select",
        "chooses the grid point each run is read at",
        "protocol.grid.enabled=true",
        _protocol("grid.enabled"),
    ),
    Needs(
        "protocol.param_tolerance",
        "bounds protocol.match_params",
        "protocol.match_params=true",
        _protocol("match_params"),
    ),
    Needs(
        "protocol.state_tolerance",
        "bounds protocol.match_state",
        "protocol.match_state=true",
        _protocol("match_state"),
    ),
    Needs(
        "score_host",
        "is the mechanism a candidate score runs in",
        "score=NAME without attention=NAME",
        lambda given: "attention" not in given.candidate,
    ),
)


def check_alone(cfg: DictConfig, compare: list[str], candidate: list[str]) -> None:
    """No key of compare's (`compare`, its overrides) given without the one it acts with (`NEEDS`)."""
    keys = {o.partition("=")[0].lstrip("+~") for o in compare}
    named = {o.partition("=")[0].split(".")[0] for o in candidate}
    refusal = unmet(NEEDS, keys.__contains__, Given(cfg, named))
    if refusal is not None:
        raise ConfigError(refusal)


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
                raise ConfigError(f"suite task {name}: no {key}; {_TASK_KEYS[key]}")
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


_TASK_KEYS = {
    "overrides": "give the `attnx train` overrides that set it up, e.g. overrides: [task=reverse]",
    "metric": "name the test metric compared, e.g. metric: test/exact_match",
    "width": "protocol.match_params and match_state scale its width keys, e.g. width: [encoder.hidden_dim]",
}


def check_runs(cfg: DictConfig, runs: list[str], suite: str) -> None:
    """The run overrides of the command line choose existing options (`hydra/launcher=nope`) and set
    nothing that the suite or the protocol sets for a run: theirs would silently win (`task=sort` on
    a suite whose task says task=reverse would train reverse)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(runs)
    check_slot_overrides(parsed)
    check_group_choices(parsed)
    for override, text in zip(parsed, runs):
        key = override.key_or_group.lstrip("+~")
        if key == "optim.lr" and cfg.protocol.lr_search:
            raise ConfigError(f"{text}: protocol.lr_search=true sets optim.lr itself (from protocol.lr_grid)")
        if key in ("optim.lr", WEIGHT_DECAY) and cfg.protocol.grid.enabled:
            raise ConfigError(f"{text}: protocol.grid.enabled=true sets {key} itself (from protocol.grid)")
        matching = next((m for m in ("match_params", "match_state") if cfg.protocol[m]), None)
        for name, spec in cfg.tasks.items():
            if matching and key in (spec.get("width") or []):
                raise ConfigError(
                    f"{text}: protocol.{matching}=true sets {key} itself (suite task {name}'s width)"
                )
            theirs = [o for o in spec.overrides if o.split("=", 1)[0].lstrip("+~") == key]
            if theirs:
                raise ConfigError(
                    f"{text}: suite {suite} sets {key} itself ({theirs[-1]} for task {name}); "
                    f"to change it, copy the suite to ./conf/suite/ and edit it there"
                )


Hosting = tuple[dict[str, list[Arm]], dict[tuple[str, str], str], dict[tuple[str, str], ResolvedRun]]


def check_arms(cfg: DictConfig, arms: list[Arm], runs: list[str]) -> Hosting:
    """Per task, the arms whose composed config validates; the others with the one line that says why
    (`attention=none: NoAttention cannot be a causal self-attention layer ...`); and every hosted (task,
    arm)'s resolved run, which matching reads again rather than composing it anew. A config the user got
    wrong for every arm (a mistyped key) is an error, not a row of refusals; so is a task whose metric
    its runs never log, a width key its config lacks, or data longer than its models take."""
    with session(CONF_DIR):  # the (task, arm) pairs share what Hydra loads
        return _check_arms(cfg, arms, runs)


def _check_arms(cfg: DictConfig, arms: list[Arm], runs: list[str]) -> Hosting:
    from attnx.config.validation import validate

    hosted: dict[str, list[Arm]] = {}
    refused: dict[tuple[str, str], str] = {}
    resolved: dict[tuple[str, str], ResolvedRun] = {}
    decoding: set[str] = set()  # the tasks whose model decodes (lm): what protocol.match_state matches
    for task, spec in cfg.tasks.items():
        hosted[task] = []
        for arm in arms:
            try:
                resolved[(task, arm.label)] = validate(compose([*spec.overrides, *arm.at(spec.site), *runs]))
            except (ConfigError, ValueError, registry.RegistryError) as error:
                refused[(task, arm.label)] = str(error)
                continue
            hosted[task].append(arm)
        if not hosted[task]:  # said by the arm the task is judged against, where it is one
            reference = next((a for a in (spec.get("baseline"), cfg.baseline) if (task, a) in refused), None)
            why = refused[(task, reference or arms[0].label)]
            raise ConfigError(f"suite task {task}: {why} (no arm can run)")
        if (task, spec.get("baseline")) in refused:
            raise ConfigError(
                f"suite task {task}: baseline={spec.baseline} cannot run here: "
                + refused[(task, spec.baseline)]
            )
        try:
            if _check_task(
                spec, [resolved[(task, arm.label)] for arm in hosted[task]], cfg.protocol.match_state
            ):
                decoding.add(task)
        except (ConfigError, ValueError) as error:
            raise ConfigError(f"suite task {task}: {error}") from None
    if all((task, arms[-1].label) in refused for task in cfg.tasks):
        why = refused[(next(iter(cfg.tasks)), arms[-1].label)]
        raise ConfigError(f"{arms[-1].label} runs on no task of the suite: {why}")
    if cfg.protocol.match_state and not decoding:
        raise ConfigError(
            "protocol.match_state=true: no suite task's model decodes (an lm task's): no state to match"
        )
    return hosted, refused, resolved


def _check_task(spec: DictConfig, resolved: Sequence[ResolvedRun], match_state: bool) -> bool:
    """The task's lengths against every hosted arm's model (its declared shape, or its data built here,
    once, when some arm's model limits what it reads), its metric against what its runs log (declared:
    nothing is built for it) and against its declaration (it rises; it has a ceiling, unless the task
    sets one), its width keys against its config (under `match_state`, an lm task must have them).
    Whether its model decodes (an lm's)."""
    from attnx.tasks.shape import check_fit

    first = resolved[0]
    name = first["task"]["name"]
    if any(run.readers for run in resolved):
        shape = first.shape or registry.build("task", first["task"]).shape()
        for run in resolved:
            check_fit(run.readers, shape, name)
    tested = first.logged("test")
    if spec.metric not in tested:
        raise ConfigError(f"metric {spec.metric}: its runs never log it; they log {', '.join(tested)}")
    declared = first.metrics[spec.metric]
    if not declared.higher_is_better:
        raise ConfigError(
            f"metric {spec.metric}: a suite's metric must rise as models improve (accuracy, exact match); "
            "it is declared lower-is-better"
        )
    if spec.get("ceiling") is None and declared.ceiling is None:
        raise ConfigError(
            f"no ceiling; metric {spec.metric} declares none: set ceiling: (its best attainable value, "
            "which the discrimination rule measures against)"
        )
    decodes = first.model_type.decodes
    if match_state and decodes and (OmegaConf.is_missing(spec, "width") or not spec.width):
        raise ConfigError(f"no width; {_TASK_KEYS['width']}")
    if not OmegaConf.is_missing(spec, "width"):
        _check_widths(spec.width, first)
    return decodes


def _check_widths(keys: Iterable[str], run: ResolvedRun) -> None:
    """Each width key is an integer key of the run's config; an unknown one lists its section's."""
    for key in keys:
        section, _, field = key.rpartition(".")
        node = _select(run.sections, section)
        value = node.get(field) if isinstance(node, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool):
            continue
        items = node.items() if isinstance(node, Mapping) else []
        names = [str(k) for k, v in items if isinstance(v, int) and not isinstance(v, bool)]
        known = [f"{section}.{k}" if section else k for k in names]
        found = "is no integer" if value is not None else "does not exist"
        raise ConfigError(f"width key {key} {found}; integer keys there: {', '.join(known) or '(none)'}")


def _select(node: Any, dotted: str) -> Any:
    """The value at a dotted key of plain data, or None."""
    for part in filter(None, dotted.split(".")):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node
