"""Model types, declared once: what a task trains (`Task.model_type`) and everything that follows from it.

A `ModelType` entry names the config sections its model is made of (`parts`), what its tasks' splits
hold as targets (`targets`: a token sequence, a label, or a next token aligned with each position), the
metrics its module
logs at validation and at each test split, each with its own direction and best value (`Metric`), the one
its runs are judged by (`headline`) and what `attnx report` shows first (`report`), whether it decodes
token by token from a state (`decodes`: `attnx generate`, state matching), and where its pieces live:

    sites     (sections) -> {site key: Site}    its attention sites, checked (attnx.models.sites)
    model     (sections, sites, sizes) -> nn.Module                        (attnx.models.assembly)
    module    the LightningModule class, built from (ModelSpec, Sites)                (attnx.lit)
    maps      (module, batch, self_attention, layers) -> per example [AttentionMap]  (attnx.track.maps)
    answer    (module, task, batch, options) -> exit code: what `attnx predict` prints (attnx.predict)

Each piece is the object itself or "module:name", imported on first use, so this module stays light
(`attnx report` reads the declarations without torch) while the pieces live in the layers that own them.
`register_model_type` adds one: a plugin file that defines a task, its model and its LightningModule
registers its model type the same way, and nothing in attnx changes. The one place a model type's name
is compared or dispatched on is here (tests/unit/test_architecture.py refuses a `model_type ==` elsewhere).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from attnx.registry.names import RegistryError, unknown_message


@dataclass(frozen=True)
class Metric:
    """A metric as its module declares it: its name without the split (`acc`), whether higher values are
    better, its best attainable value when it has one (1.0 for a share; None for a loss), and whether it
    is a proportion of the split's examples or tokens (`share`: what the convergence rule's binomial noise
    estimate needs)."""

    name: str
    higher_is_better: bool = True
    ceiling: float | None = None
    proportion: bool = False

    def at(self, split: str) -> str:
        """The name logged at `split`: `val/acc`, `test@2x/acc`."""
        return f"{split}/{self.name}"


def share(name: str) -> Metric:
    """A fraction of tokens, sequences or labels right: higher is better, at most 1."""
    return Metric(name, higher_is_better=True, ceiling=1.0, proportion=True)


LOSS = Metric("loss", higher_is_better=False)

Piece = Any  # the object, or "module:name" naming it
# What a task's examples hold besides the source (`attnx.tasks.base.PaddedSplit`): a token sequence `tgt`
# with BOS and EOS and its own vocabulary; a class `label`; or `tgt` aligned with the source, the next
# token at each position the task marks as a target and PAD elsewhere.
TARGETS = ("sequence", "label", "aligned")


@dataclass(frozen=True)
class ModelType:
    """One model type: its parts, metrics and pieces (module doc)."""

    name: str
    parts: tuple[str, ...]  # the config sections its model is made of; the first reads the source
    targets: str  # what a split's examples hold besides the source: one of TARGETS
    metrics: tuple[Metric, ...]  # what validation and every test split log (a task may add text metrics)
    headline: str  # the metric (name, no split) its curves are judged by when `convergence.metric` is null
    report: tuple[str, ...]  # the metrics (names, no split) `attnx report` shows by default, in order
    sites: Piece
    model: Piece
    module: Piece
    maps: Piece
    answer: Piece
    decodes: bool = False  # decodes token by token from a per-sequence state (an lm's cache)

    def __post_init__(self) -> None:
        if self.targets not in TARGETS:
            raise RegistryError(f"model type '{self.name}': targets={self.targets!r}, not one of {TARGETS}")
        names = [m.name for m in self.metrics]
        for name in (self.headline, *self.report):
            if name not in names:
                raise RegistryError(f"model type '{self.name}': {name} is not one of its metrics {names}")

    def piece(self, field: str) -> Any:
        """The object behind a piece (`module`, `maps`, ...), imported on first use."""
        value = getattr(self, field)
        if not isinstance(value, str):
            return value
        module, _, name = value.partition(":")
        return getattr(importlib.import_module(module), name)

    def metric(self, name: str) -> Metric:
        return next(m for m in self.metrics if m.name == name)


_TYPES: dict[str, ModelType] = {}


def register_model_type(entry: ModelType) -> ModelType:
    """Add a model type; registering the same entry again is harmless, another under its name is an error."""
    if _TYPES.get(entry.name, entry) != entry:
        raise RegistryError(f"model type '{entry.name}' is registered twice")
    _TYPES[entry.name] = entry
    return entry


def model_type(name: str) -> ModelType:
    """The registered model type `name`, or a RegistryError listing them."""
    if name not in _TYPES:
        raise RegistryError(unknown_message("model type", name, sorted(_TYPES)))
    return _TYPES[name]


def model_types() -> Iterable[ModelType]:
    return _TYPES.values()


register_model_type(
    ModelType(
        "seq2seq",
        parts=("encoder", "decoder"),
        targets="sequence",
        # loss per target token; accuracy and exact match of the decoded output (greedy or beam search)
        metrics=(
            LOSS,
            share("token_acc"),
            share("exact_match"),
            Metric("perplexity", higher_is_better=False),
        ),
        headline="exact_match",
        report=("exact_match", "token_acc"),
        sites="attnx.models.sites:seq2seq_sites",
        model="attnx.models.assembly:seq2seq_model",
        module="attnx.lit.seq2seq:Seq2SeqModule",
        maps="attnx.track.maps:seq2seq_maps",
        answer="attnx.predict:decoded",
    )
)
register_model_type(
    ModelType(
        "classification",
        parts=("encoder", "classifier"),
        targets="label",
        metrics=(LOSS, share("acc"), share("f1")),
        headline="acc",
        report=("acc", "f1"),
        sites="attnx.models.sites:classifier_sites",
        model="attnx.models.assembly:classifier_model",
        module="attnx.lit.classifier:ClassifierModule",
        maps="attnx.track.maps:pooling_maps",
        answer="attnx.predict:classified",
    )
)
register_model_type(
    ModelType(
        "lm",
        parts=("lm",),
        targets="aligned",
        # at the positions the task marks as targets: accuracy, and exact match over a sequence's targets
        metrics=(LOSS, share("acc"), share("exact_match")),
        headline="acc",
        report=("acc", "exact_match"),
        sites="attnx.models.sites:lm_sites",
        model="attnx.models.assembly:lm_model",
        module="attnx.lit.lm:LMModule",
        maps="attnx.track.maps:lm_maps",
        answer="attnx.predict:recalled",
        decodes=True,
    )
)
