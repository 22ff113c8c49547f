"""Semantic checks of a composed `attnx train` config that Hydra's types cannot express, run before
any training starts, and the `ResolvedRun` they leave (`validate`): bounds by key (`BOUNDS`) and by field
name (`FIELD_RULES`), keys appended past the schema, AdamW's betas, the Trainer's and callbacks' arguments
(`attnx.config.lightning`), the task's own arguments, the attention sites, plugins against the conformance
kit's shape check, the metrics callbacks and convergence name, and (where the task declares its shape)
the data's lengths against the model's. Each error is a ConfigError (or the task's ValueError) that names
the key and the value.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Mapping
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from attnx import registry
from attnx.config.compose import ConfigError
from attnx.config.lightning import check_callbacks, check_trainer
from attnx.config.resolved import PLUMBING, ResolvedRun, frozen
from attnx.registry import Metric, ModelType
from attnx.tasks.base import Task
from attnx.tasks.shape import Reader, check_fit
from attnx.track.results import unwritable

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


def check_fields(sections: Mapping[str, Any]) -> None:
    """FIELD_RULES on every field of SECTIONS, by its name, slots' sub-sections included
    (`encoder.attention.num_heads`)."""
    for section in SECTIONS:
        _check_fields(section, sections.get(section) or {})


def _check_fields(path: str, values: Mapping[str, Any]) -> None:
    for key, value in values.items():
        if isinstance(value, Mapping):
            _check_fields(f"{path}.{key}", value)
            continue
        if isinstance(value, list):  # an lm's plan: `lm.layers.1.window`
            for i, item in enumerate(value):
                if isinstance(item, Mapping):
                    _check_fields(f"{path}.{key}.{i}", item)
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


def check_creatable(key: str, folder: Path) -> None:
    """Fail before training, not when the first compile would, on a folder that cannot be made."""
    why = unwritable(folder)
    if why is not None:
        raise ConfigError(f"{key}={folder}: cannot create or write the folder ({why})")


def validate(cfg: DictConfig, here: bool = True) -> ResolvedRun:
    """Semantic checks Hydra's types cannot express; each error names the keys involved. Not `here`:
    the run will run on another machine (a SLURM sweep's job, checked before it is submitted), whose
    accelerators this one cannot see. Returns the run resolved once (`ResolvedRun`): its sections as
    plain data, its model type, its checked attention sites and its declared metrics."""
    appended = _appended(cfg)
    if appended:
        key, fields = appended[0]
        raise ConfigError(f"unknown key {key}; allowed: {', '.join(fields)}")
    check_bounds(cfg)
    check_betas(cfg)
    if cfg.resume not in (None, "auto"):
        raise ConfigError(f"resume must be null or auto, got {cfg.resume!r}")
    if not isinstance(cfg.compile, bool) and cfg.compile != "auto":
        raise ConfigError(f"compile must be true, false or auto, got {cfg.compile!r}")
    if cfg.compile_cache:
        check_creatable("compile_cache", Path(cfg.compile_cache))
    check_trainer(cfg.trainer, here)
    check_callbacks(cfg)
    sections = with_plan(resolve(cfg))
    check_fields(sections)
    task: Task = registry.build("task", sections["task"])  # its own argument checks; no data is built
    kind = registry.model_type(task.model_type)
    sites = check_sites(kind, sections)
    check_plugins(sections, kind, sites)
    metrics = declared_metrics(kind, task)
    name = sections["task"]["name"]
    check_monitors(cfg, metrics, name)
    judged = check_convergence(sections["convergence"], metrics, kind, name)
    readers = readers_of(kind, sections)
    shape = task.declared_shape()
    if shape is not None:  # else the run checks its data once built (attnx.train.assemble)
        check_fit(readers, shape, name)
    return ResolvedRun(frozen(sections), kind, sites, metrics, judged, readers, shape, budget(cfg.trainer))


def budget(trainer: DictConfig) -> dict[str, int]:
    """The trainer's limits that bound a run (`trainer.max_epochs`, `trainer.max_steps`; -1 or null: none),
    which a continuation raises together (`attnx.compare.budget`)."""
    limits = {key: trainer.get(key) for key in ("max_epochs", "max_steps")}
    return {f"trainer.{key}": int(value) for key, value in limits.items() if value is not None and value > 0}


def with_plan(sections: dict[str, Any]) -> dict[str, Any]:
    """`sections` with every per-layer plan (`lm.layers`, a slot's plan such as `encoder.layers`) typed and
    completed (`attnx.models.plan`), so what a run records and a checkpoint saves holds every layer's
    hyperparameters; an error names the layer's key."""
    from attnx.models.plan import plan_of

    done = dict(sections)
    try:
        lm = sections.get("lm")
        if isinstance(lm, dict) and lm.get("layers") is not None:
            done["lm"] = {**lm, "layers": plan_of(lm)}
        for kind in ("encoder", "decoder"):
            section = sections.get(kind)
            if not isinstance(section, dict) or section.get("name") not in registry.available(kind):
                continue  # no such part, or a name `check_fields` refuses with the names there are
            for slot in registry.slots_of(registry.get(kind, section["name"])).values():
                if slot.plan and section.get(slot.plan) is not None:
                    done[kind] = {**done[kind], slot.plan: plan_of(section, f"{kind}.{slot.plan}")}
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return done


def resolve(cfg: DictConfig) -> dict[str, Any]:
    """Every key of a composed config but `PLUMBING`, as plain data, resolved: the one conversion of the
    run's sections; `???` left unset is an error naming the key."""
    kept = [key for key in cfg if key not in PLUMBING]
    try:
        return {
            str(key): OmegaConf.to_container(cfg[key], resolve=True, throw_on_missing=True)
            if isinstance(cfg[key], DictConfig)
            else cfg[key]
            for key in kept
        }
    except Exception as error:  # a missing value, a broken interpolation: OmegaConf names the key
        from attnx.config.compose import one_line

        raise ConfigError(one_line(error)) from error


def declared_metrics(kind: ModelType, task: Task) -> dict[str, Metric]:
    """Every metric a run of `task` logs, by the name it logs at each split (`val/acc`, `test/acc`,
    `test@2x/acc`), with its declaration: the model type's metrics and the task's text metrics (BLEU,
    PER: torchmetrics' own `higher_is_better` and bounds). Nothing is built but the metric objects."""
    own = [*kind.metrics, *(text_metric(name, metric) for name, metric in task.text_metrics().items())]
    splits = ["val", *task.split_names()[2:]]  # the test splits: test, then its slices
    return {metric.at(split): metric for split in splits for metric in own}


def text_metric(name: str, metric: Any) -> Metric:
    """A torchmetrics Metric as attnx declares metrics: its own direction, and its bound on that side."""
    higher = metric.higher_is_better is not False
    return Metric(name, higher, metric.plot_upper_bound if higher else metric.plot_lower_bound)


def check_sites(kind: ModelType, sections: Mapping[str, Any]) -> Sites:
    """Every attention site's mechanism can serve it (`attnx.models.sites`: capability flags, positions),
    an lm plan is given only to a model with an lm, and the rnn decoder knows the cross-attention's
    placement. Returns the checked sites, which the
    model is then built from."""
    from attnx.models.sites import resolve_sites
    from attnx.nn.attention import PLACEMENTS

    parts = {k: sections.get(k) if k in kind.parts else None for k in ("encoder", "decoder")}
    if "lm" not in kind.parts and (sections.get("lm") or {}).get("layers") is not None:
        raise ConfigError(
            f"lm.layers: task {sections['task']['name']} trains a {kind.name} model, which has no lm; "
            "a plan chooses an lm's layers (attention= chooses this model's mechanism)"
        )
    try:
        found = resolve_sites(kind.name, {**sections, **parts})
    except ValueError as error:
        raise ConfigError(str(error)) from None
    decoder = parts["decoder"]
    if decoder is None or decoder["name"] != "rnn":
        return found
    attention = found.attention.mechanism.cls  # the class the sites resolved, not looked up again
    if attention.placement not in PLACEMENTS:
        raise ConfigError(
            f"attention={sections['attention']['name']} cannot drive the rnn decoder (placement "
            f"{attention.placement!r}, expected one of {', '.join(PLACEMENTS)}), so it cannot be used with "
            f"the seq2seq task={sections['task']['name']} and decoder=rnn"
        )
    return found


def readers_of(kind: ModelType, sections: Mapping[str, Any]) -> tuple[Reader, ...]:
    """What each part of the model reads at most: the first part the source (an lm's, the sequence), a
    decoder its steps; a part with a `max_len` limits it, unless it is a position table turned off
    (`positions: none`; a self-attention encoder refuses longer inputs whatever its positions)."""
    parts = kind.parts
    found = []
    for section, what, steps in (
        (parts[0], "source" if "encoder" in parts else "sequence", False),
        *((("decoder", "decoder steps (targets, or decoding)", True),) if "decoder" in parts else ()),
    ):
        node = sections.get(section)
        if not isinstance(node, Mapping) or node.get("max_len") is None:
            continue
        if section != "encoder" and node.get("positions") == "none":
            continue
        limit = int(node["max_len"])
        ratio = float(sections["decode"]["max_len_ratio"]) if steps else 0.0
        found.append(Reader(section, limit, what, steps, ratio))
    return tuple(found)


def check_plugins(sections: Mapping[str, Any], kind: ModelType, sites: Sites) -> None:
    """The conformance kit, whole, on every site whose mechanism or score is a plugin (shipped with attnx or
    the user's), at the run's configured values and at the dims its model gives the site (the model built
    here without data, to learn them): a plugin that breaks the contract at these values is one line before
    training. Each distinct site is checked once per process (`attnx.testing.check_run`)."""
    from attnx.models.assembly import Sizes
    from attnx.testing import check_run

    try:
        check_run(sites, lambda: kind.piece("model")(sections, sites, Sizes(4, 4, 2)))
    except AssertionError as error:
        raise ConfigError(str(error)) from None


def check_monitors(cfg: DictConfig, metrics: Mapping[str, Metric], task: str) -> None:
    """Every callback's `monitor` (the checkpoints' choice, `stop_at`) names a metric validation logs:
    Lightning would say so only at the end of the first epoch."""
    logged = sorted(name for name in metrics if name.startswith("val/"))
    for name, callback in (cfg.get("callbacks") or {}).items():
        monitor = None if callback is None else callback.get("monitor")
        if monitor is not None and monitor not in logged:
            raise ConfigError(
                f"callbacks.{name}.monitor={monitor}: task {task} logs no such metric; "
                f"it logs {', '.join(logged)}"
            )


def check_convergence(
    convergence: Mapping[str, Any], metrics: Mapping[str, Metric], kind: ModelType, task: str
) -> str:
    """The metric `convergence` judges (`convergence.metric`, or the model type's headline one), which
    validation must log, and a tolerance under its ceiling (a tolerance of a whole 0-1 metric calls every
    curve converged). Returns the metric."""
    metric = convergence["metric"] or f"val/{kind.headline}"
    logged = sorted(name for name in metrics if name.startswith("val/"))
    if metric not in logged:
        raise ConfigError(
            f"convergence.metric={metric}: task {task} logs no such metric; it logs {', '.join(logged)}"
        )
    ceiling = convergence["ceiling"] if convergence["ceiling"] is not None else metrics[metric].ceiling
    if ceiling is not None and metrics[metric].higher_is_better and not convergence["tolerance"] < ceiling:
        raise ConfigError(
            f"convergence.tolerance must be < {ceiling} ({metric}'s ceiling), got {convergence['tolerance']}"
        )
    return str(metric)


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
