"""Config checks that turn bad input into one clear line before any training starts."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import operator
import os
import types
import typing
from collections.abc import Callable, Collection
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from attnx import registry, schema


def _config_dir() -> str:
    """The shipped configs: `attnx/conf` in an installed wheel, the top-level `conf/` of a source
    checkout (pyproject's package-dir maps one onto the other when a wheel is built)."""
    package = Path(__file__).parent
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


def group_options(groups: set[str]) -> dict[str, list[str]]:
    """Each config group's options as Hydra's config loader finds them (the user's config folders and
    Hydra plugins' options included: `hydra/launcher` has joblib and submitit's); a key that is no
    group has none. The schema's `*_schema` entries are no options to choose."""
    import hydra
    from hydra.core.global_hydra import GlobalHydra

    with hydra.initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        found = {
            g: loader.get_group_options(g, config_name="train", overrides=search_path_override())
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


# Hydra flags whose composition differs from `train`'s: `--config-name other` and the like
_CONFIG_FLAGS = ("-cn", "-cp", "-cd", "--config-name", "--config-path", "--config-dir")


def check_overrides(argv: list[str]) -> None:
    """Before anything launches: reject unknown options of every config group (did-you-mean), then
    compose what the jobs will compose, so that Hydra's own errors (unknown key, wrong type) come out
    as one line. A plain run also reports a `???` left unset; in a sweep that is each run's failure."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    # what is not an override is a Hydra flag or its value (`--cfg job`)
    overrides = [a for a in argv if not a.startswith("-") and ("=" in a or a.startswith("~"))]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as error:  # Hydra's grammar: names the override it cannot parse
        raise ConfigError(one_line(error)) from error
    registry.load_all()
    keys = {o.key_or_group for o in parsed if "." not in o.key_or_group} - set(registry.KINDS)
    options = group_options(keys)
    for group, name in group_choices(parsed, {*registry.KINDS, *options}):
        check_choice(group, name, options.get(group, []))
    if any(a.split("=")[0] in _CONFIG_FLAGS for a in argv):
        return
    multirun = "-m" in argv or "--multirun" in argv
    for job in covering_jobs(parsed) if multirun else [overrides]:
        compose(job, require_values=len(overrides) == len(argv))


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


def compose(
    overrides: list[str], return_hydra_config: bool = False, require_values: bool = True
) -> DictConfig:
    """`attnx train <overrides>`'s config, composed as the CLI does (user config folders included),
    with any `???` left unset reported as a ConfigError naming the key (unless not `require_values`)."""
    import hydra

    try:
        with hydra.initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = hydra.compose(
                "train", [*overrides, *search_path_override()], return_hydra_config=return_hydra_config
            )
    except Exception as error:
        raise ConfigError(one_line(error)) from error
    missing = [k for k in _missing(OmegaConf.to_container(cfg, resolve=False)) if not k.startswith("hydra.")]
    if missing and require_values:
        raise ConfigError(
            f"missing value for {', '.join(missing)}: set it on the command line, e.g. {missing[0]}=..."
        )
    return cfg


def _appended(node: Any, prefix: str = "") -> list[tuple[str, list[str]]]:
    """(key, the allowed keys) for every key that a schema-typed node's dataclass lacks: Hydra's merge
    rejects them, but a `+key=value` override opens the node and appends past the schema."""
    if not isinstance(node, DictConfig) or node._is_missing() or node._is_none():
        return []
    node_type = OmegaConf.get_type(node)
    fields = list(node_type.__dataclass_fields__) if dataclasses.is_dataclass(node_type) else None
    found = []
    for key, value in node.items_ex(resolve=False):
        if fields is not None and key not in fields:
            found.append((f"{prefix}{key}", fields))
        found += _appended(value, f"{prefix}{key}.")
    return found


def _missing(node: Any, prefix: str = "") -> list[str]:
    """Keys left at `???` (a required constructor argument nobody set), without resolving anything."""
    if isinstance(node, dict):
        return [key for k, v in node.items() for key in _missing(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")] if node == "???" else []


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


# Bounds the schema's types cannot express: key -> (comparison, bound). A key that a config lacks (a user's
# optimiser without weight_decay) is not checked.
BOUNDS = {
    "threads": (">=", 1),
    "optim.lr": (">", 0),
    "optim.optimizer.weight_decay": (">=", 0),
    "optim.scheduler.warmup_steps": (">=", 0),
    "decode.beam_size": (">=", 1),
    "decode.max_len_ratio": (">", 0),
}
_COMPARE = {">": operator.gt, ">=": operator.ge}

# Bounds by field name, one rule for every field of `model` and of the registry's sections (task,
# encoder, attention, score: plugins' too, whose fields nobody listed): a size or a count is a
# positive integer, a dropout probability lies in [0, 1). A field set to null is not checked.
SECTIONS = ("model", *registry.KINDS)
FIELD_RULES: tuple[tuple[tuple[str, ...], str, Callable[[Any], bool]], ...] = (
    (
        ("*_dim", "*_size", "num_*", "*_layers", "*_heads", "max_len", "window"),
        "a positive integer",
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
    ),
    (("dropout", "*_dropout"), "in [0, 1)", lambda v: isinstance(v, int | float) and 0 <= v < 1),
)


def check_bounds(cfg: DictConfig, bounds: dict[str, tuple[str, float]] = BOUNDS) -> None:
    """Each of `bounds` that `cfg` sets, as in BOUNDS (`attnx predict` adds its own keys)."""
    for key, (comparison, bound) in bounds.items():
        value = OmegaConf.select(cfg, key)
        if value is not None and not _COMPARE[comparison](value, bound):
            raise ConfigError(f"{key} must be {comparison} {bound}, got {value}")


def check_fields(cfg: DictConfig) -> None:
    """FIELD_RULES on every field of SECTIONS, by its name."""
    for section in SECTIONS:
        values = OmegaConf.to_container(cfg[section], resolve=True) if cfg.get(section) is not None else {}
        for key, value in values.items():
            for patterns, allowed, holds in FIELD_RULES:
                if value is not None and any(fnmatch(key, p) for p in patterns) and not holds(value):
                    raise ConfigError(f"{section}.{key}={value}: must be {allowed}")


def check_betas(cfg: DictConfig) -> None:
    """Adam's (β₁, β₂), where the optimiser has them: two decay rates in [0, 1)."""
    betas = OmegaConf.select(cfg, "optim.optimizer.betas")
    if betas is not None and not (len(betas) == 2 and all(0 <= b < 1 for b in betas)):
        raise ConfigError(
            f"optim.optimizer.betas={list(betas)}: must be two numbers in [0, 1), e.g. [0.9,0.999]"
        )


def validate(cfg: DictConfig) -> None:
    """Semantic checks Hydra's types cannot express; each error names the keys involved."""
    appended = _appended(cfg)
    if appended:
        key, fields = appended[0]
        raise ConfigError(f"unknown key {key}; allowed: {', '.join(fields)}")
    check_bounds(cfg)
    check_fields(cfg)
    check_betas(cfg)
    if cfg.resume not in (None, "auto"):
        raise ConfigError(f"resume must be null or auto, got {cfg.resume!r}")
    check_trainer(cfg.trainer)
    from attnx.models.build import resolve_score_name
    from attnx.nn.attention import PLACEMENTS

    attention = registry.get("attention", cfg.attention.name)
    resolve_score_name(cfg.attention.name, cfg.get("score"))

    task = registry.get("task", cfg.task.name)
    if task.model_type == "seq2seq" and attention.placement not in PLACEMENTS:
        raise ConfigError(
            f"attention={cfg.attention.name} cannot drive a decoder (placement {attention.placement!r}, "
            f"expected one of {', '.join(PLACEMENTS)}), so it cannot be used with "
            f"the seq2seq task={cfg.task.name}"
        )
    check_plugins(cfg)


def check_trainer(trainer: DictConfig) -> None:
    """Every `trainer.*` key is an argument of Lightning's Trainer with a value of its annotated type,
    and the accelerator exists and is available here. The Trainer itself takes `max_epochs=ten` and
    fails only when the fit loop compares it. Interpolated values are checked by the Trainer."""
    import lightning.pytorch as pl

    hints = typing.get_type_hints(pl.Trainer.__init__)
    for key, value in trainer.items_ex(resolve=False):
        if key.startswith("_") or OmegaConf.is_interpolation(trainer, key):  # _target_, _partial_
            continue
        if key not in hints:
            close = difflib.get_close_matches(key, list(hints), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"unknown key trainer.{key}: not an argument of lightning's Trainer{hint}")
        plain = OmegaConf.to_container(value) if isinstance(value, DictConfig | ListConfig) else value
        if not _fits(plain, hints[key]):
            expected = inspect.formatannotation(hints[key])
            raise ConfigError(f"trainer.{key}={plain}: expected {expected}")
    if isinstance(trainer.get("accelerator"), str):
        check_accelerator(trainer.accelerator)


def _fits(value: Any, annotation: Any) -> bool:
    """Whether a config value can be passed as `annotation`. Optional, Union, Literal, int, float,
    bool, str, list and dict are checked; any other class passes, since a string or a `_target_`
    node may stand for it (`strategy: ddp`, a profiler object)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if origin is list:
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict)
    checked = {
        type(None): type(None),
        bool: bool,
        int: int,
        float: (int, float),
        str: str,
        list: list,
        dict: dict,
    }
    if annotation not in checked:
        return True
    # bool is an int to isinstance, but `max_epochs=true` is no number of epochs
    return isinstance(value, checked[annotation]) and (annotation is bool or not isinstance(value, bool))


def check_accelerator(name: str) -> None:
    """A known accelerator (Lightning's AcceleratorRegistry, and its `auto` and `gpu`) that is
    available on this machine; the error lists the ones that are."""
    from lightning.pytorch.accelerators import AcceleratorRegistry

    usable = {
        n: AcceleratorRegistry[n]["accelerator"].is_available()
        for n in AcceleratorRegistry.available_accelerators()
    }
    usable |= {"auto": True, "gpu": usable.get("cuda", False) or usable.get("mps", False)}
    available = ", ".join(sorted(n for n, ok in usable.items() if ok))
    if name not in usable:
        close = difflib.get_close_matches(name, list(usable), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ConfigError(
            f"trainer.accelerator={name}: unknown accelerator{hint} known: {', '.join(sorted(usable))}; "
            f"available here: {available}"
        )
    if not usable[name]:
        raise ConfigError(
            f"trainer.accelerator={name}: not available on this machine; available: {available}"
        )


def check_plugins(cfg: DictConfig) -> None:
    """The conformance kit's shape check on a plugin score or mechanism with the configured
    hyperparameters, so that a wrong shape is the kit's one line before training, not a size
    mismatch inside a decoder. Built-ins are skipped: they pass the whole kit (tests/test_kit.py)."""
    from attnx.models.build import resolve_score_name, score_factory
    from attnx.testing import check_attention_shapes, check_score_shapes

    def plugin(kind: str, name: str | None) -> bool:
        return name is not None and registry.registry(kind).entry(name).origin != "built-in"

    def hyperparams(section: DictConfig) -> dict[str, Any]:
        return {k: v for k, v in OmegaConf.to_container(section, resolve=True).items() if k != "name"}

    score_name = resolve_score_name(cfg.attention.name, cfg.get("score"))
    score = hyperparams(cfg.score) if cfg.get("score") is not None else {}
    try:
        if plugin("score", score_name):
            check_score_shapes(registry.get("score", score_name), **score)
        if plugin("attention", cfg.attention.name):
            factory = None if score_name is None else score_factory({"name": score_name, **score})
            check_attention_shapes(
                registry.get("attention", cfg.attention.name), factory, **hyperparams(cfg.attention)
            )
    except AssertionError as error:
        raise ConfigError(f"fails the conformance kit (attnx plugins check): {error}") from error
