"""Lightning modules: training/evaluation steps, torchmetrics, optimisers; the task data module."""

from __future__ import annotations

from typing import Any


def lit_module(spec: dict[str, Any]) -> Any:
    """The LightningModule for a task kind, built from a model spec (see `AttnxModule`)."""
    if spec["kind"] == "seq2seq":
        from attnx.lit.seq2seq import Seq2SeqModule

        return Seq2SeqModule(spec)
    from attnx.lit.classifier import ClassifierModule

    return ClassifierModule(spec)
