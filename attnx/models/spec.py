"""`ModelSpec`: what rebuilds a model without its data, the one object that flows from a composed config
to the model, the LightningModule and every checkpoint.

A checkpoint stores it as versioned plain data (`to_dict`), so `attnx predict` reads it with
`torch.load(weights_only=True)`; `from_dict` reads any version ever written, upgrading an older one in
this one place: the spec's own layout (`_UPGRADES`, one step per version) and then each registered
section to today's classes (`registry.upgrade`: renamed plugins, removed hyperparameters), an lm plan's
layers among them (`lm.layers`, absent from specs written before plans: the run's attention throughout).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnx import registry
from attnx.models.classifier import Classifier
from attnx.registry import ModelType, model_type

# Every part's section. A model type (`attnx.registry.model_types`) is made of some of them, the first
# reading the source (an lm's, the sequence); a decoder reads the target vocabulary, a classifier head the
# classes.
SECTIONS = ("encoder", "decoder", "classifier", "lm")
# The `classifier` section: the classifier head's hyperparameters, which attnx/config/schema.py's
# ClassifierConfig types for a composed config; a call from Python is checked against the same list.
CLASSIFIER_KEYS = tuple(inspect.signature(Classifier).parameters)[3:]  # after encoder, attention, num_classes
VERSION = 1  # of `to_dict`'s layout; 0: the unversioned dict of attnx before ModelSpec


@dataclass(frozen=True)
class ModelSpec:
    """The config sections of a run (plain dicts; a part its model type lacks is None) and the built
    task's vocabularies: the source's, and the target's (a decoder's) or the classes (a classifier
    head's)."""

    model_type: str  # a registered model type's name (`attnx.registry.model_type`)
    task: dict[str, Any]
    attention: dict[str, Any]
    score: dict[str, Any] | None
    optim: dict[str, Any]
    decode: dict[str, Any]
    src_itos: list[str]
    encoder: dict[str, Any] | None = None
    decoder: dict[str, Any] | None = None
    classifier: dict[str, Any] | None = None
    lm: dict[str, Any] | None = None
    tgt_itos: list[str] | None = None
    classes: list[str] | None = None
    compile: bool | str = False  # true, false or "auto" (attnx.lit.module.compiles)
    embedding_seed: int | None = None  # paired embeddings: every table drawn from this seed

    def __post_init__(self) -> None:
        model_type(self.model_type)  # an unknown one is a RegistryError listing the registered ones

    @property
    def declared(self) -> ModelType:
        """Its model type's declaration: parts, metrics, and the pieces that build and train it."""
        return model_type(self.model_type)

    @property
    def parts(self) -> tuple[str, ...]:
        return self.declared.parts

    def sections(self) -> dict[str, Any]:
        """The config sections its model is built from, by name: the run's `attention` and `score`, and
        every part's (None for a part its model type lacks)."""
        return {"attention": self.attention, "score": self.score, **{s: getattr(self, s) for s in SECTIONS}}

    def with_decode(self, decode: dict[str, Any]) -> ModelSpec:
        """This spec with some decoding options replaced (`attnx predict decode.beam_size=4`)."""
        return dataclasses.replace(self, decode={**self.decode, **decode})

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a checkpoint, with the layout's `version`."""
        return {"version": VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, saved: dict[str, Any], dropped: list[str] | None = None) -> ModelSpec:
        """A spec from any checkpoint's `to_dict` (or the unversioned dict before it), upgraded to today's
        layout and registry. A saved hyperparameter that a class no longer takes is a
        `registry.StaleArguments` error, unless `dropped` is given: then it is left out and listed there."""
        spec = dict(saved)
        version = spec.pop("version", 0)
        if version > VERSION:
            raise ValueError(f"a model spec of version {version}, newer than this attnx's ({VERSION})")
        for upgrade in _UPGRADES[version:]:
            upgrade(spec)
        for kind in registry.KINDS:
            if spec.get(kind) is not None:
                spec[kind] = registry.upgrade(kind, spec[kind], dropped)
        lm = spec.get("lm")
        if lm is not None and lm.get("layers") is not None:  # a plan: each layer's section, as above
            spec["lm"] = {**lm, "layers": registry.upgrade_plan(lm["layers"], dropped)}
        return cls(**spec)


def _from_unversioned(spec: dict[str, Any]) -> None:
    """Version 0 -> 1: the classifier head's section was `model`, saved whatever the model type, and before
    the decoder had a group of its own `model` held the rnn decoder's sizes too (a seq2seq spec without
    `decoder`)."""
    model, parts = spec.pop("model"), model_type(spec["model_type"]).parts
    if "decoder" in parts and spec.get("decoder") is None:
        spec["decoder"] = {"name": "rnn", **model}
    head = {k: v for k, v in model.items() if k in CLASSIFIER_KEYS}
    spec["classifier"] = head if "classifier" in parts else None


# _UPGRADES[v] turns a version-v dict into a version v+1 one, in place
_UPGRADES: list[Callable[[dict[str, Any]], None]] = [_from_unversioned]
