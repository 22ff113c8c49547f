"""Lightning modules: training/evaluation steps, torchmetrics, optimisers; the task data module."""

from __future__ import annotations

from importlib import import_module
from typing import Any

# model_type -> the LightningModule that trains it, imported on first use
MODULES = {
    "seq2seq": "attnx.lit.seq2seq:Seq2SeqModule",
    "classification": "attnx.lit.classifier:ClassifierModule",
    "lm": "attnx.lit.lm:LMModule",
}


def lit_module(spec: dict[str, Any]) -> Any:
    """The LightningModule for the spec's model type, built from a model spec (see `AttnxModule`)."""
    model_type = spec["model_type"]
    if model_type not in MODULES:
        raise ValueError(f"model_type must be one of {', '.join(MODULES)}; got {model_type!r}")
    module, name = MODULES[model_type].split(":")
    return getattr(import_module(module), name)(spec)
