"""Config checks that turn bad input into one clear line before any training starts."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from attnx import registry

_NOISE = ("object_type", "Set the environment", "Config search path", "provider=")
_SWEEP_FUNCTIONS = ("choice(", "range(", "interval(", "glob(", "tag(", "sort(", "shuffle(")


class ConfigError(ValueError):
    """A configuration the user can fix; its message names the key and what is allowed."""


def check_overrides(argv: list[str], conf_dir: str) -> None:
    """Reject unknown registry names with did-you-mean, then (single runs) compose once to report
    Hydra's own errors (unknown key, wrong type, missing value) as one line."""
    overrides = [a for a in argv if not a.startswith("-")]
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        kind = key.split("@")[0]
        if not sep or kind not in registry.KINDS or value.startswith(_SWEEP_FUNCTIONS):
            continue
        names = registry.available(kind)
        for choice in (v.strip() for v in value.split(",")):
            if choice not in names and choice != "null":
                raise ConfigError(registry.unknown_message(kind, choice, names))
    if len(overrides) == len(argv):  # no Hydra flags (-m, --cfg, --help): a plain run
        _compose(conf_dir, overrides)


def _compose(conf_dir: str, overrides: list[str]) -> DictConfig:
    from hydra import compose, initialize_config_dir

    try:
        with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
            cfg = compose(config_name="train", overrides=overrides)
    except Exception as error:
        raise ConfigError(one_line(error)) from error
    missing = _missing(OmegaConf.to_container(cfg, resolve=False))
    if missing:
        raise ConfigError(
            f"missing value for {', '.join(missing)}: set it on the command line, e.g. {missing[0]}=..."
        )
    return cfg


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
            elif not ln.startswith(_NOISE) and ln not in parts:
                parts.append(ln)
        current = current.__cause__ or current.__context__
    message = "; ".join(parts[:3])
    if full_key and full_key not in message:
        message += f" (key: {full_key})"
    return message


def validate(cfg: DictConfig) -> None:
    """Semantic checks Hydra's types cannot express; each error names the keys involved."""
    if cfg.threads is not None and cfg.threads < 1:
        raise ConfigError(f"threads must be >= 1, got {cfg.threads}")
    if cfg.resume not in (None, "auto"):
        raise ConfigError(f"resume must be null or auto, got {cfg.resume!r}")
    for key in ("lr", "weight_decay", "warmup_steps"):
        if cfg.optim[key] < 0 or (key == "lr" and cfg.optim[key] == 0):
            raise ConfigError(f"optim.{key} must be {'> 0' if key == 'lr' else '>= 0'}, got {cfg.optim[key]}")
    if cfg.optim.scheduler not in ("cosine", "constant"):
        raise ConfigError(f"optim.scheduler must be cosine or constant, got {cfg.optim.scheduler!r}")
    if cfg.decode.beam_size < 1:
        raise ConfigError(f"decode.beam_size must be >= 1, got {cfg.decode.beam_size}")
    attention = registry.get("attention", cfg.attention.name)
    score: Any = cfg.get("score")
    if score is not None and attention.default_score is None:
        raise ConfigError(f"attention={cfg.attention.name} uses no score function; remove score={score.name}")
    from attnx.nn.attention import PLACEMENTS

    task = registry.get("task", cfg.task.name)
    if task.kind == "seq2seq" and attention.placement not in PLACEMENTS:
        raise ConfigError(
            f"attention={cfg.attention.name} cannot drive a decoder (placement {attention.placement!r}, "
            f"expected one of {', '.join(PLACEMENTS)}), so it cannot be used with "
            f"the seq2seq task={cfg.task.name}"
        )
