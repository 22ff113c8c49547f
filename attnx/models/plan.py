"""A per-layer plan (an lm's `lm.layers`, a self-attention encoder's `encoder.layers`: a slot's `plan`
field, `registry.Slot`): which mechanism each block uses, with its hyperparameters and, optionally, its own
score, as Zoology's Based (a gated convolution beside a Taylor linear attention) or the hybrids that
interleave attention with recurrent layers are written.

A plan is a list of attention sections, `[{name: base_conv}, {name: based, feature_dim: 16}]`, each
optionally with a `score` section; null (the default) means every block uses the run's `attention` and
`score`. A plan shorter than `num_layers` repeats as a pattern, which `num_layers` must then be a multiple
of. Layer i's entry is `lm.layers.{i % len(plan)}`, the key every error and attention site names.

The layers' sections are not typed by Hydra (a list of sections of different classes has no one schema),
so `complete` types each against its class's registered config (`registry.config_class`): an unknown
mechanism or key, or a wrong type, is one line naming the layer and the key; the result holds every
hyperparameter, defaults included, so a saved model does not change with a later default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnx import registry

KEY = "lm.layers"
EXAMPLE = {"attention": "linear", "score": "dot"}  # a name for each kind's error message
_T = TypeVar("_T")


def where(index: int, key: str = KEY) -> str:
    """The config key of a plan's entry, which its errors and its attention site are named by."""
    return f"{key}.{index}"


def plan_of(section: Mapping[str, Any] | None, key: str = KEY) -> list[dict[str, Any]] | None:
    """The plan of the section `key` is a field of (`lm.layers`: the lm section's), completed and checked
    (`complete`), or None when it has none."""
    owner, _, field = key.rpartition(".")
    if section is None or section.get(field) is None:
        return None
    layers = section[field]
    if not isinstance(layers, Sequence) or isinstance(layers, str) or not layers:
        raise ValueError(
            f"{key}={layers!r}: must be a non-empty list of attention sections, e.g. "
            "[{name:sliding_window},{name:linear}], or null for one mechanism in every layer"
        )
    layers_count, num_layers = len(layers), section.get("num_layers")
    if isinstance(num_layers, int) and num_layers % layers_count:
        how = "more than" if layers_count > num_layers else "not a divisor of"
        raise ValueError(
            f"{key} has {layers_count} entries, {how} {owner}.num_layers={num_layers}: a plan is one entry "
            "per layer, or a pattern repeated, so num_layers must be a multiple of its length"
        )
    return [complete(i, layer, key) for i, layer in enumerate(layers)]


def complete(index: int, layer: Any, key: str = KEY) -> dict[str, Any]:
    """Layer `index`'s section typed by its mechanism's registered config, every hyperparameter filled in,
    its name the registered one; its `score` the same way by the score's config."""
    given = dict(layer) if isinstance(layer, Mapping) else layer
    score = given.pop("score", None) if isinstance(given, dict) else None
    done = _typed("attention", where(index, key), given)
    if score is not None:
        if isinstance(score, str):  # `score: rope`, as a run's `score=rope`
            score = {"name": score}
        done["score"] = _typed("score", f"{where(index, key)}.score", score)
    return done


def _typed(kind: str, key: str, section: Any) -> dict[str, Any]:
    if not isinstance(section, Mapping) or not isinstance(section.get("name"), str):
        raise ValueError(f"{key}={section!r}: must be a section with a name, e.g. {{name:{EXAMPLE[kind]}}}")
    try:
        entry = registry.registry(kind).entry(section["name"])
    except registry.RegistryError as error:
        raise ValueError(f"{key}.name: {error}") from None
    known = entry.hyperparams()
    unknown = sorted(set(section) - set(known) - {"name"})
    if unknown:
        takes = ", ".join(known) or "no hyperparameters"
        raise ValueError(f"{key}.{unknown[0]}: {kind} {entry.name} takes no such key; it takes {takes}")
    schema = OmegaConf.structured(registry.config_class(entry))
    try:
        merged = OmegaConf.merge(schema, {k: v for k, v in section.items() if k != "name"})
        typed = OmegaConf.to_container(merged, throw_on_missing=True)
    except OmegaConfBaseException as error:  # a wrong type, a value left unset: OmegaConf knows the key
        first = str(error).strip().splitlines()[0]
        field = getattr(error, "full_key", None)
        raise ValueError(f"{key}.{field}: {first}" if field else f"{key}: {first}") from None
    assert isinstance(typed, dict)
    return {str(k): v for k, v in typed.items()}


def per_layer(entries: Sequence[_T], num_layers: int) -> list[_T]:
    """Each of `num_layers` layers' entry of a plan: the plan itself, or its pattern repeated."""
    return [entries[i % len(entries)] for i in range(num_layers)]


def label(names: Sequence[str]) -> str:
    """A plan as a run's choice of mechanism and as a compare arm's label: `base_conv+based`."""
    return "+".join(names)
