"""Semantic checks of a composed `attnx train` config that Hydra's types cannot express, run before
any training starts: bounds by key (`BOUNDS`) and by field name (`FIELD_RULES`), keys appended past
the schema, AdamW's betas, the Trainer's arguments against Lightning's signature, and plugins against
the conformance kit's shape check. Each error is a ConfigError that names the key and the value.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import operator
import tempfile
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from omegaconf import DictConfig, ListConfig, OmegaConf

from attnx import registry
from attnx.config.compose import ConfigError, plain
from attnx.models.spec import PARTS
from attnx.models.spec import SECTIONS as PART_SECTIONS

if TYPE_CHECKING:
    from attnx.models.sites import Sites

# Bounds the schema's types cannot express: key -> (comparison, bound). A key that a config lacks (a user's
# optimiser without weight_decay) is not checked.
BOUNDS = {
    "threads": (">=", 1),
    "optim.lr": (">", 0),
    "optim.optimizer.weight_decay": (">=", 0),
    "optim.scheduler.warmup_steps": (">=", 0),
    "decode.beam_size": (">=", 1),
    "decode.max_len_ratio": (">", 0),
    "convergence.tolerance": (">=", 0),
    "convergence.min_validations": (">=", 2),
    "convergence.ceiling": (">", 0),
}
_COMPARE = {">": operator.gt, ">=": operator.ge}

# Bounds by field name, one rule for every field of `classifier`, `lm` and the registry's sections (task,
# encoder, attention, score: plugins' too, whose fields nobody listed): a size or a count is a
# positive integer (a feed-forward width may be 0), a dropout probability lies in [0, 1). A field set
# to null is not checked.
SECTIONS = ("classifier", "lm", *registry.KINDS)
FIELD_RULES: tuple[tuple[tuple[str, ...], str, Callable[[Any], bool]], ...] = (  # the first match applies
    (
        ("ff_dim",),
        "a non-negative integer (0: no feed-forward sublayer)",
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    ),
    (
        ("*_dim", "*_size", "num_*", "*_layers", "*_heads", "max_len", "window"),
        "a positive integer",
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
    ),
    (("dropout", "*_dropout"), "in [0, 1)", lambda v: isinstance(v, int | float) and 0 <= v < 1),
)


def check_bounds(cfg: DictConfig, bounds: Mapping[str, tuple[str, float]] = BOUNDS) -> None:
    """Each of `bounds` that `cfg` sets, as in BOUNDS (`attnx predict` adds its own keys)."""
    for key, (comparison, bound) in bounds.items():
        value = OmegaConf.select(cfg, key)
        if value is not None and not _COMPARE[comparison](value, bound):
            raise ConfigError(f"{key} must be {comparison} {bound}, got {value}")


def check_fields(cfg: DictConfig) -> None:
    """FIELD_RULES on every field of SECTIONS, by its name, slots' sub-sections included
    (`encoder.attention.num_heads`)."""
    for section in SECTIONS:
        values = OmegaConf.to_container(cfg[section], resolve=True) if cfg.get(section) is not None else {}
        _check_fields(section, cast(dict[str, Any], values))


def _check_fields(path: str, values: dict[str, Any]) -> None:
    for key, value in values.items():
        if isinstance(value, dict):
            _check_fields(f"{path}.{key}", value)
            continue
        rule = next((r for r in FIELD_RULES if any(fnmatch(key, p) for p in r[0])), None)
        if value is not None and rule is not None and not rule[2](value):
            raise ConfigError(f"{path}.{key}={value}: must be {rule[1]}")


def check_betas(cfg: DictConfig) -> None:
    """Adam's (β₁, β₂), where the optimiser has them: two decay rates in [0, 1)."""
    betas = OmegaConf.select(cfg, "optim.optimizer.betas")
    if betas is not None and not (len(betas) == 2 and all(0 <= b < 1 for b in betas)):
        raise ConfigError(
            f"optim.optimizer.betas={list(betas)}: must be two numbers in [0, 1), e.g. [0.9,0.999]"
        )


def unwritable(folder: Path) -> str | None:
    """Why `folder` cannot be made and written into, or None; makes it, as its first writer would."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return error.strerror or str(error)
    return None


def check_creatable(key: str, folder: Path) -> None:
    """Fail before training, not when the first compile would, on a folder that cannot be made."""
    why = unwritable(folder)
    if why is not None:
        raise ConfigError(f"{key}={folder}: cannot create or write the folder ({why})")


def validate(cfg: DictConfig, here: bool = True) -> Sites:
    """Semantic checks Hydra's types cannot express; each error names the keys involved. Not `here`:
    the run will run on another machine (a SLURM sweep's job, checked before it is submitted), whose
    accelerators this one cannot see. Returns the run's checked attention sites (`check_sites`), for
    the model, the results record and the heatmaps."""
    appended = _appended(cfg)
    if appended:
        key, fields = appended[0]
        raise ConfigError(f"unknown key {key}; allowed: {', '.join(fields)}")
    check_bounds(cfg)
    check_fields(cfg)
    check_betas(cfg)
    if cfg.resume not in (None, "auto"):
        raise ConfigError(f"resume must be null or auto, got {cfg.resume!r}")
    if not isinstance(cfg.compile, bool) and cfg.compile != "auto":
        raise ConfigError(f"compile must be true, false or auto, got {cfg.compile!r}")
    if cfg.compile_cache:
        check_creatable("compile_cache", Path(cfg.compile_cache))
    check_trainer(cfg.trainer, here)
    check_callbacks(cfg)
    sites = check_sites(cfg)
    check_plugins(cfg, sites)
    return sites


def check_sites(cfg: DictConfig) -> Sites:
    """Every attention site's mechanism can serve it (`attnx.models.sites`: capability flags, positions),
    and the rnn decoder knows the cross-attention's placement. Returns the checked sites, which the
    model is then built from."""
    from attnx.models.sites import resolve_sites
    from attnx.nn.attention import PLACEMENTS

    model_type = registry.get("task", cfg.task.name).model_type
    parts = PARTS.get(model_type, ())
    sections = {k: plain(cfg.get(k)) if k in parts else None for k in ("encoder", "decoder")}
    try:
        found = resolve_sites(
            model_type, attention=plain(cfg.attention), score=plain(cfg.get("score")), **sections
        )
    except ValueError as error:
        raise ConfigError(str(error)) from None
    attention = found.attention.mechanism.cls  # the class the sites resolved, not looked up again
    if "decoder" in parts and cfg.decoder.name == "rnn" and attention.placement not in PLACEMENTS:
        raise ConfigError(
            f"attention={cfg.attention.name} cannot drive the rnn decoder (placement "
            f"{attention.placement!r}, expected one of {', '.join(PLACEMENTS)}), so it cannot be used with "
            f"the seq2seq task={cfg.task.name} and decoder=rnn"
        )
    return found


def check_lengths(cfg: DictConfig, task: Any) -> None:
    """The longest sequence of a built task's splits fits the `max_len` of each model part that reads
    it: the self-attention encoder refuses longer inputs, and a position table (`positions` other than
    none) has no row past it. A decoder reads its targets (teacher-forced) and, on val and test, up to
    `decode.max_len_ratio` x source + 5 decoded steps. Otherwise a ValueError once training started."""
    sources = {split: int(data.src_len.max()) for split, data in task.splits.items() if len(data)}
    parts = PARTS[task.model_type]  # the first reads the source (an lm's: the whole sequence)
    reads = [(parts[0], sources, "source" if "encoder" in parts else "sequence")]  # (section, lengths, what)
    if "decoder" in parts:
        decoded = {s: int(cfg.decode.max_len_ratio * n) + 5 for s, n in sources.items() if s != "train"}
        steps = {
            split: max(int(data.tgt_len.max()) - 1, decoded.get(split, 0))
            for split, data in task.splits.items()
            if len(data)
        }
        reads.append(("decoder", steps, "decoder steps (targets, or decoding)"))
    for section, lengths, what in reads:
        node = cfg.get(section)
        limit = node.get("max_len") if isinstance(node, DictConfig) else None
        if limit is None or not lengths or (section != "encoder" and node.get("positions") == "none"):
            continue
        split, longest = max(lengths.items(), key=lambda item: item[1])
        if longest > limit:
            # a test slice (`test@4x`) is as long as task.test_slices asks
            shorten = "lower task.test_slices" if "@" in split else "shorten the task"
            raise ConfigError(
                f"{section}.max_len={limit}: the {split} split of task={cfg.task.name} needs {longest} "
                f"tokens of {what}; raise {section}.max_len to at least {longest} or {shorten}"
            )


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


def check_plugins(cfg: DictConfig, sites: Sites) -> None:
    """The conformance kit, whole, on every site whose mechanism or score is a plugin (shipped with attnx or
    the user's), at the run's configured values and at the dims its model gives the site (the model built
    here without data, to learn them): a plugin that breaks the contract at these values is one line before
    training. Each distinct site is checked once per process (`attnx.testing.check_run`)."""
    from attnx.models.assembly import build_model
    from attnx.testing import check_run

    parts = PARTS[sites.model_type]

    def build() -> Any:
        sections = {part: plain(cfg.get(part)) if part in parts else None for part in PART_SECTIONS}
        return build_model(
            sites.model_type,
            4,
            sections["encoder"],
            plain(cfg.attention),
            plain(cfg.get("score")),
            sections["classifier"],
            decoder=sections["decoder"],
            tgt_vocab=4,
            num_classes=2,
            lm=sections["lm"],
            sites=sites,
        )

    try:
        check_run(sites, build)
    except AssertionError as error:
        raise ConfigError(str(error)) from None


def check_monitors(cfg: DictConfig, logged: Iterable[str], task: str) -> None:
    """Every callback's `monitor` (the checkpoints' choice, `stop_at`) names a metric validation logs:
    Lightning would say so only at the end of the first epoch."""
    logged = sorted(logged)
    for name, callback in (cfg.get("callbacks") or {}).items():
        monitor = None if callback is None else callback.get("monitor")
        if monitor is not None and monitor not in logged:
            raise ConfigError(
                f"callbacks.{name}.monitor={monitor}: task {task} logs no such metric; "
                f"it logs {', '.join(logged)}"
            )


def check_convergence(cfg: DictConfig, logged: Iterable[str], model_type: str, task: str) -> str:
    """The metric `convergence` judges (`convergence.metric`, or the model type's headline one), which
    validation must log, and a tolerance under its ceiling (a tolerance of a whole 0-1 metric calls every
    curve converged). Returns the metric."""
    from attnx.track.convergence import HEADLINE, natural_ceiling

    metric = cfg.convergence.metric or HEADLINE[model_type]
    logged = sorted(logged)
    if metric not in logged:
        raise ConfigError(
            f"convergence.metric={metric}: task {task} logs no such metric; it logs {', '.join(logged)}"
        )
    ceiling = cfg.convergence.ceiling if cfg.convergence.ceiling is not None else natural_ceiling(metric)
    if ceiling is not None and not cfg.convergence.tolerance < ceiling:
        raise ConfigError(
            f"convergence.tolerance must be < {ceiling} ({metric}'s ceiling), got {cfg.convergence.tolerance}"
        )
    return metric


def _appended(node: Any, prefix: str = "") -> list[tuple[str, list[str]]]:
    """(key, the allowed keys) for every key that a schema-typed node's dataclass lacks: Hydra's merge
    rejects them, but a `+key=value` override opens the node and appends past the schema."""
    if not isinstance(node, DictConfig) or node._is_missing() or node._is_none():
        return []
    node_type = OmegaConf.get_type(node)
    fields = list(node_type.__dataclass_fields__) if dataclasses.is_dataclass(node_type) else None
    found = []
    for node_key, value in node.items_ex(resolve=False):
        key = str(node_key)
        if fields is not None and key not in fields:
            found.append((f"{prefix}{key}", fields))
        found += _appended(value, f"{prefix}{key}.")
    return found
