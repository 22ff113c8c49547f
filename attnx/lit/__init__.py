"""Lightning modules: training/evaluation steps, torchmetrics, optimisers; the task data module."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnx.models.sites import Sites
    from attnx.models.spec import ModelSpec
    from attnx.tasks.base import ModelType

# model type -> the LightningModule that trains it, imported on first use (the one branch on the type here)
MODULES: dict[ModelType, str] = {
    "seq2seq": "attnx.lit.seq2seq:Seq2SeqModule",
    "classification": "attnx.lit.classifier:ClassifierModule",
    "lm": "attnx.lit.lm:LMModule",
}


def lit_module(spec: ModelSpec, sites: Sites | None = None) -> Any:
    """The LightningModule for the spec's model type, built from a model spec (see `AttnxModule`) on
    `sites`, config validation's resolution of the spec's attention sites (resolved anew without them)."""
    module, name = MODULES[spec.model_type].split(":")
    return getattr(import_module(module), name)(spec, sites)
