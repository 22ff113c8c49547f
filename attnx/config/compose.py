"""Composing `attnx train`'s config as the CLI does, and checking its overrides before anything
launches: unknown group options with did-you-mean, Hydra's own errors as one line. The semantic
checks of a composed config are `attnx.config.validation`."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Collection
from pathlib import Path
from typing import Any, NamedTuple

from omegaconf import DictConfig, OmegaConf, open_dict

from attnx import registry
from attnx.config import schema


def _config_dir() -> str:
    """The shipped configs: `attnx/conf` in an installed wheel, the top-level `conf/` of a source
    checkout (pyproject's package-dir maps one onto the other when a wheel is built)."""
    package = Path(__file__).parents[1]
    installed = package / "conf"
    return str(installed if installed.is_dir() else package.parent / "conf")


CONF_DIR = _config_dir()
schema.store()  # train.yaml's defaults list names the schema: in the ConfigStore before anything composes


def user_config_dirs() -> list[Path]:
    """Config folders of the user's own, searched after the shipped ones: `./conf` of the launch
    folder, then each folder of ATTNX_CONFIG_PATH (as `./plugins` and ATTNX_PLUGIN_PATH for code).
    A `./conf/experiment/mine.yaml` is then `experiment=mine`."""
    dirs = [
        Path.cwd() / "conf",
        *(Path(p) for p in os.environ.get("ATTNX_CONFIG_PATH", "").split(os.pathsep) if p),
    ]
    shipped = Path(CONF_DIR).resolve()
    return list(dict.fromkeys(d.resolve() for d in dirs if d.is_dir() and d.resolve() != shipped))


def search_path_override() -> list[str]:
    """`hydra.searchpath=[...]` adding `user_config_dirs()`, or nothing when there are none."""
    dirs = user_config_dirs()
    if not dirs:
        return []
    quoted = (str(d).replace("\\", "\\\\").replace("'", "\\'") for d in dirs)
    return ["hydra.searchpath=[" + ",".join(f"'file://{d}'" for d in quoted) + "]"]


_NOISE = ("object_type", "reference_type", "Set the environment", "Config search path", "provider=")


class ConfigError(ValueError):
    """A configuration the user can fix; its message names the key and what is allowed."""


def group_choices(parsed: list[Any], groups: Collection[str]) -> list[tuple[str, str]]:
    """(group, option) for every option of `groups` that the parsed overrides choose, sweeps' values
    included (`attention=dot,additive`, `logger=choice(csv,wandb)`). Globs and ranges of options are
    left to Hydra."""
    from hydra.core.override_parser.types import ValueType

    chosen = []
    for override in parsed:
        if override.key_or_group not in groups or override.is_delete():
            continue
        if override.value_type in (ValueType.CHOICE_SWEEP, ValueType.SIMPLE_CHOICE_SWEEP):
            names = list(override.sweep_string_iterator())
        elif override.value_type == ValueType.ELEMENT:
            names = [override.get_value_element_as_str()]
        else:
            names = []
        chosen += [(override.key_or_group, name) for name in names if name != "null"]
    return chosen


def group_options(groups: set[str], config_name: str = "train") -> dict[str, list[str]]:
    """Each config group's options as Hydra's config loader finds them (the user's config folders and
    Hydra plugins' options included: `hydra/launcher` has joblib and submitit's); a key that is no
    group has none. The schema's `*_schema` entries are no options to choose."""
    import hydra
    from hydra.core.global_hydra import GlobalHydra

    with hydra.initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        found = {
            g: loader.get_group_options(g, config_name=config_name, overrides=search_path_override())
            for g in groups
        }
    return {g: [o for o in options if not o.endswith("_schema")] for g, options in found.items() if options}


def check_choice(group: str, name: str, options: list[str]) -> None:
    """An unknown option of a config group is a ConfigError with did-you-mean and the full list. The
    registry's kinds answer themselves: their message also matches aliases, and a renamed name warns."""
    if group in registry.KINDS:
        registry.registry(group).canonical(name)
    elif name not in options:
        raise ConfigError(registry.unknown_message(group, name, options))


def check_group_choices(parsed: list[Any]) -> None:
    """Every option of a config group that the parsed overrides choose exists (`check_choice`)."""
    keys = {o.key_or_group for o in parsed if "." not in o.key_or_group} - set(registry.KINDS)
    options = group_options(keys)
    for group, name in group_choices(parsed, {*registry.KINDS, *options}):
        check_choice(group, name, options.get(group, []))


# Hydra flags whose composition differs from `train`'s: `--config-name other` and the like
_CONFIG_FLAGS = ("-cn", "-cp", "-cd", "--config-name", "--config-path", "--config-dir")


# Hydra's modes, of which a command line takes one (Hydra says so with a traceback)
_MODES = {
    **dict.fromkeys(("--run", "-r"), "--run"),
    **dict.fromkeys(("--multirun", "-m"), "-m"),
    **dict.fromkeys(("--cfg", "-c"), "--cfg"),
    **dict.fromkeys(("--info", "-i"), "--info"),
    **dict.fromkeys(("--shell-completion", "-sc"), "--shell-completion"),
}


def check_modes(argv: list[str]) -> str | None:
    """The one of Hydra's modes that `argv` names (`-m`, `--cfg`, ...), if any; naming two is an error. A
    sweep's configs are shown one job at a time."""
    modes = list(dict.fromkeys(_MODES[a] for a in argv if a in _MODES))
    if len(modes) > 1:
        hint = "; to see a sweep job's config, give that job's values without -m" if "-m" in modes else ""
        raise ConfigError(f"{' and '.join(modes)} together: Hydra takes one of them{hint}")
    return modes[0] if modes else None


RENAMED = {"model": "classifier"}  # config groups renamed since, old -> new: the old name still works, warned


def renamed_keys(argv: list[str]) -> list[str]:
    """`argv` with each override of a renamed group or its keys (`model.dropout=0.2`, `model=default`,
    `+model.x=1`, `~model`) written with today's name (`RENAMED`), and a `RenamedWarning` naming it."""
    found = []
    for arg in argv:
        match = re.match(r"(~|\+\+|\+)?(\w+)(?=[.=@]|$)", arg)
        if match and match.group(2) in RENAMED and ("=" in arg or arg.startswith("~")):
            old, new = match.group(2), RENAMED[match.group(2)]
            arg = f"{match.group(1) or ''}{new}{arg[match.end() :]}"
            warnings.warn(f"`{old}` is now `{new}`: write {arg}", registry.RenamedWarning, stacklevel=2)
        found.append(arg)
    return found


def renamed_sections(cfg: DictConfig) -> None:
    """A composed config's section under an old name (`RENAMED`: `model:` in a user's experiment or
    task_defaults file) merged over today's, with a `RenamedWarning`, and removed: the run sees one
    section."""
    for old, new in RENAMED.items():
        with open_dict(cfg):
            section = cfg.pop(old, None)
            if section is not None:
                # warned from here, not the caller: a run reads its config more than once (check,
                # then the job), and Python shows a warning once per place it is issued from
                message = f"config section `{old}:` is now `{new}:`"
                warnings.warn(message, registry.RenamedWarning, stacklevel=1)
                cfg[new] = OmegaConf.merge(cfg[new], section)


class Sweep(NamedTuple):
    """A sweep the command line asks for: its parsed overrides and the Hydra config that launches it."""

    parsed: list[Any]
    hydra: DictConfig


def check_overrides(argv: list[str]) -> Sweep | None:
    """Before anything launches: reject unknown options of every config group (did-you-mean), then
    compose what the jobs will compose, so that Hydra's own errors (unknown key, wrong type) come out
    as one line. A plain run also reports a `???` left unset. Returns the sweep that `argv` launches, whose
    jobs the caller checks each as the job would check itself (`attnx.train.preflight`), or None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.types import RunMode

    # what is not an override is a Hydra flag or its value (`--cfg job`)
    overrides = [a for a in argv if not a.startswith("-") and ("=" in a or a.startswith("~"))]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as error:  # Hydra's grammar: names the override it cannot parse
        raise ConfigError(one_line(error)) from error
    mode = check_modes(argv)
    registry.load_all()
    check_slot_overrides(parsed)
    check_plan(parsed)
    check_group_choices(parsed)
    if any(a.split("=")[0] in _CONFIG_FLAGS for a in argv):
        return None
    multirun = mode == "-m"
    try:  # the first job of a sweep: what all its jobs share, said with attnx's hints
        job = covering_jobs(parsed)[0] if multirun else overrides
        cfg = compose(job, require_values=len(overrides) == len(argv), return_hydra_config=True)
    except ConfigError as error:
        raise ConfigError(_slot_hint(str(error))) from None
    # a config may ask for a sweep itself (hparams_search=optuna: hydra.mode); `--cfg` launches nothing
    if (multirun or cfg.hydra.mode == RunMode.MULTIRUN) and mode not in ("--cfg", "--info"):
        return Sweep(parsed, cfg.hydra)
    return None


SLURM_LAUNCHER = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"


def check_slurm_tasks(cfg: DictConfig) -> None:
    """Under SLURM each process of a run is one task that srun starts (Lightning reads the ranks from
    SLURM): a SLURM launcher must ask for `trainer.devices` tasks on each of `trainer.num_nodes` nodes."""
    launcher, trainer = cfg.hydra.launcher, cfg.get("trainer") or {}
    devices, nodes = trainer.get("devices", 1), trainer.get("num_nodes", 1)
    if launcher.get("_target_") != SLURM_LAUNCHER or not isinstance(devices, int) or devices < 1:
        return  # "auto" and device lists: Lightning decides on the node
    for key, wanted, why in (
        ("tasks_per_node", devices, "trainer.devices"),
        ("nodes", nodes, "trainer.num_nodes"),
    ):
        if launcher.get(key) != wanted:
            raise ConfigError(
                f"hydra.launcher.{key}={launcher.get(key)} but {why}={wanted}: under SLURM each process of "
                "a run is a task; use hydra/launcher=slurm_ddp, which sets both from the trainer"
            )


def check_plan(parsed: list[Any]) -> None:
    """`hydra.sweeper.plan=FILE` (the plan sweeper's) names a readable list of jobs; Hydra composes each
    job itself before launching any."""
    from hydra.errors import HydraException

    from hydra_plugins.attnx_plan_sweeper.plan_sweeper import read_plan

    for override in parsed:
        if override.key_or_group == "hydra.sweeper.plan" and not override.is_sweep_override():
            try:
                given = override.value()  # a file's name, or the jobs themselves as a list
                read_plan(given if isinstance(given, list) else str(given))
            except HydraException as error:
                raise ConfigError(str(error)) from None


def check_slot_overrides(parsed: list[Any]) -> None:
    """`encoder.attention=dot` (or `hydra.launcher=joblib`) sets a group's section to a string: say that
    a slot (or Hydra's launcher or sweeper) is a config group."""
    groups = {*registry.slot_groups(), "hydra/launcher", "hydra/sweeper"}
    for override in parsed:
        key = override.key_or_group
        if key.replace(".", "/") in groups and not override.is_sweep_override() and "/" not in key:
            value = override.value()
            if isinstance(value, str):
                group = key.replace(".", "/")
                raise ConfigError(
                    f"{key}={value}: {key} is a config group, chosen as {group}={value} "
                    f"(its hyperparameters are then {key}.*)"
                )


def _slot_hint(message: str) -> str:
    """Hydra's "No match in the defaults list" for a slot group, and its "Multiple values" for a group
    of train.yaml's defaults list added with `+` (`+experiment=x`), said in attnx's words."""
    for group, hosts in registry.slot_groups().items():
        if f"Could not override '{group}'. No match in the defaults list" in message:
            kind, slot = group.split("/")
            only = " or ".join(f"{kind}={host}" for host in hosts)
            return f"{group}: only {only} has the slot `{slot}`; choose it first ({kind}={hosts[0]})"
    added = re.match(r"Multiple values for (\S+)\. To override a value use 'override \S+: (\S+)'", message)
    if added:
        group, option = added.groups()
        return f"+{group}={option}: {group} is already a group of train.yaml; write {group}={option} (no +)"
    return message


def covering_jobs(parsed: list[Any]) -> list[list[str]]:
    """Overrides of as few jobs of a sweep as take every value of every choice sweep between them:
    job i takes each sweep's i-th value (its last, once exhausted). A range sweep's values are all
    of one type, so its first stands for them; Hydra checks globs and intervals (Optuna) itself."""
    from hydra.core.override_parser.types import ValueType

    columns = []
    for override in parsed:
        if not override.is_sweep_override():
            columns.append([override.input_line])
        elif override.value_type in (ValueType.CHOICE_SWEEP, ValueType.SIMPLE_CHOICE_SWEEP):
            columns.append([f"{override.get_key_element()}={v}" for v in override.sweep_string_iterator()])
        elif override.value_type == ValueType.RANGE_SWEEP:
            columns.append([f"{override.get_key_element()}={next(override.sweep_string_iterator())}"])
    jobs = max((len(c) for c in columns), default=1)
    return [[c[min(i, len(c) - 1)] for c in columns] for i in range(jobs)]


def plain(node: Any) -> Any:
    """A config node as plain data (dicts, lists), resolved; `???` left unset is an error, never a value."""
    if not isinstance(node, DictConfig):
        return node
    return OmegaConf.to_container(node, resolve=True, throw_on_missing=True)


def compose(
    overrides: list[str], return_hydra_config: bool = False, require_values: bool = True
) -> DictConfig:
    """`attnx train <overrides>`'s config, composed as the CLI does (user config folders included),
    with any `???` left unset reported as a ConfigError naming the key (unless not `require_values`)."""
    import hydra

    from attnx.config.session import session

    registry.load_all()  # every plugin's config group entry, as the CLI has them

    try:
        with session(CONF_DIR):  # the caller's, where one is open (many compositions share its cache)
            cfg = hydra.compose(
                "train",
                [*renamed_keys(overrides), *search_path_override()],
                return_hydra_config=return_hydra_config,
            )
    except Exception as error:
        raise ConfigError(one_line(error)) from error
    renamed_sections(cfg)
    if require_values:
        check_missing(cfg)
    return cfg


def check_missing(cfg: DictConfig) -> None:
    """A ConfigError naming the keys of a composed config left at `???` (its `hydra` node aside)."""
    missing = [k for k in _missing(OmegaConf.to_container(cfg, resolve=False)) if not k.startswith("hydra.")]
    if missing:
        raise ConfigError(
            f"missing value for {', '.join(missing)}: set it on the command line, e.g. {missing[0]}=..."
        )


def _missing(node: Any, prefix: str = "") -> list[str]:
    """Keys left at `???` (a required constructor argument nobody set), without resolving anything."""
    if isinstance(node, dict):
        return [key for k, v in node.items() for key in _missing(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")] if node == "???" else []


def file_in_the_way(folder: Path) -> Path | None:
    """The file that stands where `folder`, or a folder above it, would be made; None if it can be."""
    return next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)


def one_line(error: BaseException) -> str:
    """Hydra/OmegaConf errors span several lines and a cause chain; keep what names the problem."""
    parts: list[str] = []
    full_key = None
    current: BaseException | None = error
    while current is not None:
        lines = [ln.strip() for ln in str(current).splitlines() if ln.strip()]
        for ln in lines:
            if ln.startswith("full_key:"):
                full_key = full_key or ln.split(":", 1)[1].strip()
            elif not ln.startswith(_NOISE) and "$VALUE" not in ln and ln not in parts:  # "$VALUE": a template
                parts.append(ln)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    message = "; ".join(parts[:3])
    if full_key and full_key not in message:
        message += f" (key: {full_key})"
    return message
