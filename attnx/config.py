"""Config checks that turn bad input into one clear line before any training starts."""

from __future__ import annotations

import dataclasses
import operator
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

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


def registry_choices(overrides: list[str]) -> list[tuple[str, str]]:
    """(kind, name) for every registry name the overrides choose, sweeps' values included, parsed by
    Hydra's own override grammar (`attention=dot,additive`, `attention=choice(dot,additive)`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType

    chosen = []
    for override in OverridesParser.create().parse_overrides(overrides):
        kind = override.key_or_group
        if kind not in registry.KINDS or override.is_delete():
            continue
        if override.value_type in (ValueType.CHOICE_SWEEP, ValueType.SIMPLE_CHOICE_SWEEP):
            names = list(override.sweep_string_iterator())
        elif override.value_type == ValueType.ELEMENT:
            names = [override.get_value_element_as_str()]
        else:  # a glob or range of names: Hydra checks what it expands to
            names = []
        chosen += [(kind, name) for name in names if name != "null"]
    return chosen


def check_overrides(argv: list[str]) -> None:
    """Reject unknown registry names with did-you-mean, then (single runs) compose once to report
    Hydra's own errors (unknown key, wrong type, missing value) as one line."""
    # what is not an override is a Hydra flag or its value (`--cfg job`)
    overrides = [a for a in argv if not a.startswith("-") and ("=" in a or a.startswith("~"))]
    try:
        chosen = registry_choices(overrides)
    except Exception as error:  # Hydra's grammar: names the override it cannot parse
        raise ConfigError(one_line(error)) from error
    registry.load_all()
    for kind, name in chosen:
        registry.registry(kind).canonical(name)  # a RegistryError with did-you-mean when unknown
    if len(overrides) == len(argv):  # no Hydra flags (-m, --cfg, --help): a plain run
        compose(overrides)


def compose(overrides: list[str], return_hydra_config: bool = False) -> DictConfig:
    """`attnx train <overrides>`'s config, composed as the CLI does (user config folders included),
    with any `???` left unset reported as a ConfigError naming the key."""
    import hydra

    try:
        with hydra.initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = hydra.compose(
                "train", [*overrides, *search_path_override()], return_hydra_config=return_hydra_config
            )
    except Exception as error:
        raise ConfigError(one_line(error)) from error
    missing = [k for k in _missing(OmegaConf.to_container(cfg, resolve=False)) if not k.startswith("hydra.")]
    if missing:
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
        current = current.__cause__ or current.__context__
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
}
_COMPARE = {">": operator.gt, ">=": operator.ge}


def validate(cfg: DictConfig) -> None:
    """Semantic checks Hydra's types cannot express; each error names the keys involved."""
    appended = _appended(cfg)
    if appended:
        key, fields = appended[0]
        raise ConfigError(f"unknown key {key}; allowed: {', '.join(fields)}")
    for key, (comparison, bound) in BOUNDS.items():
        value = OmegaConf.select(cfg, key)
        if value is not None and not _COMPARE[comparison](value, bound):
            raise ConfigError(f"{key} must be {comparison} {bound}, got {value}")
    if cfg.resume not in (None, "auto"):
        raise ConfigError(f"resume must be null or auto, got {cfg.resume!r}")
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
