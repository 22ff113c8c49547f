"""What `attnx compare` checks before anything trains, beyond its own keys (`attnx.compare.keys`); each
error is one ConfigError naming the key, value or file. The run overrides of the command line against what
the suite and the protocol set (`check_runs`), and each arm on each suite task (`check_arms`): the
composed config validates, the task's metric is one its runs log, its width keys exist, and its data fits
the models' `max_len`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from omegaconf import DictConfig, OmegaConf

from attnx import registry
from attnx.cli import Needs, unmet
from attnx.compare.keys import TASK_KEYS
from attnx.compare.plan import WEIGHT_DECAY, Arm
from attnx.config.compose import (
    CONF_DIR,
    ConfigError,
    check_group_choices,
    check_slot_overrides,
    compose,
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
        raise ConfigError(f"no width; {TASK_KEYS['width']}")
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
