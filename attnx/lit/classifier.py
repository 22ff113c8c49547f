"""Classification: cross-entropy, accuracy and macro-F1 (torchmetrics)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from attnx.lit.module import AttnxModule, given
from attnx.models.sites import Sites
from attnx.models.spec import ModelSpec
from attnx.tasks.base import Batch


class ClassifierModule(AttnxModule):
    def __init__(self, spec: ModelSpec, sites: Sites | None = None) -> None:
        super().__init__(spec, sites)
        n = len(spec.classes or ())
        # the loss a torchmetrics Metric too: under DDP every metric is reduced over all ranks' examples
        metrics = MetricCollection(
            {
                "loss": MeanMetric(),
                "acc": MulticlassAccuracy(n, average="micro"),
                "f1": MulticlassF1Score(n, average="macro"),
            }
        )
        self.evaluated_by(metrics)

    def forward(self, batch: Batch, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.model(batch.src, batch.src_len, need_weights=need_weights)

    @staticmethod
    def loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(logits, given(batch.label, "labels"))

    def _evaluate(self, batch: Batch, stage: str) -> None:
        logits, _ = self(batch)
        metrics = self.metrics_of(stage)
        label = given(batch.label, "labels")
        size = len(label)
        metrics["loss"].update(self.loss(logits, batch), weight=size)
        metrics["acc"].update(logits, label)
        metrics["f1"].update(logits, label)
        self.log_metrics(metrics, size, stage)
