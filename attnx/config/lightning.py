"""The Trainer's and the callbacks' arguments, checked against Lightning's own signatures before anything
trains: Lightning takes `max_epochs=ten` or `EarlyStopping(stopping_threshold=abc)` and fails only when the
fit loop or the first validation reads it. Each error is a ConfigError that names the key and the value.
"""

from __future__ import annotations

import difflib
import inspect
import types
import typing
from collections.abc import Callable
from typing import Any, cast

from omegaconf import DictConfig, ListConfig, OmegaConf

from attnx.config.compose import ConfigError


def check_trainer(trainer: DictConfig, here: bool = True) -> None:
    """Every `trainer.*` key is an argument of Lightning's Trainer with a value of its annotated type,
    and the accelerator exists and (`here`) is available on this machine. The Trainer itself takes
    `max_epochs=ten` and fails only when the fit loop compares it. Interpolated values are checked by
    the Trainer."""
    import lightning.pytorch as pl

    check_arguments("trainer", trainer, pl.Trainer.__init__, "lightning's Trainer")
    if isinstance(trainer.get("accelerator"), str):
        check_accelerator(trainer.accelerator, here)


def check_callbacks(cfg: DictConfig) -> None:
    """Every callback's arguments against its `_target_`'s annotated signature, as for the Trainer:
    Lightning's EarlyStopping takes `stopping_threshold=abc` and fails only at the first validation."""
    from hydra.utils import get_object

    for name, node in (cfg.get("callbacks") or {}).items():
        if isinstance(node, DictConfig) and isinstance(node.get("_target_"), str):
            check_arguments(f"callbacks.{name}", node, get_object(node._target_), node._target_)


def check_arguments(path: str, node: DictConfig, target: Callable[..., Any], what: str) -> None:
    """Each key of `node` is an argument of `target` (unless it takes **kwargs) with a value of its
    annotated type. Interpolated values are left to the target."""
    function = cast(Any, target).__init__ if isinstance(target, type) else target
    hints = typing.get_type_hints(function)
    takes_any = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(function).parameters.values())
    for node_key, value in node.items_ex(resolve=False):
        key = str(node_key)
        if key.startswith("_") or OmegaConf.is_interpolation(node, key):  # _target_, _partial_
            continue
        if key not in hints:
            if takes_any:
                continue
            close = difflib.get_close_matches(key, list(hints), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"unknown key {path}.{key}: not an argument of {what}{hint}")
        plain = OmegaConf.to_container(value) if isinstance(value, DictConfig | ListConfig) else value
        if not _fits(plain, hints[key]):
            expected = inspect.formatannotation(hints[key])
            raise ConfigError(f"{path}.{key}={plain}: expected {expected}")


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
    checked: dict[Any, type | tuple[type, ...]] = {
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


def check_accelerator(name: str, here: bool = True) -> None:
    """A known accelerator (Lightning's AcceleratorRegistry, and its `auto` and `gpu`) that is
    available on this machine (unless not `here`); the error lists the ones that are."""
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
    if here and not usable[name]:
        raise ConfigError(
            f"trainer.accelerator={name}: not available on this machine; available: {available}"
        )
