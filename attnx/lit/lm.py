"""Language modelling (the `lm` kind): next-token cross-entropy at the positions the task marks as
targets; accuracy there and exact match over each sequence's targets (torchmetrics)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy

from attnx.lit.module import AttnxModule, given
from attnx.models.sites import Sites
from attnx.models.spec import ModelSpec
from attnx.tasks.base import Batch
from attnx.vocab import PAD


class LMModule(AttnxModule):
    """`batch.tgt` [B, T] holds the token each position must predict, PAD where there is none (an MQAR
    sequence's filler and pairs); only target positions count in the loss and the metrics."""

    def __init__(self, spec: ModelSpec, sites: Sites | None = None) -> None:
        super().__init__(spec, sites)
        vocab = len(spec.src_itos)
        # the loss a torchmetrics Metric too: under DDP every metric is reduced over all ranks' examples
        metrics = MetricCollection(
            {
                "loss": MeanMetric(),  # per target position
                "acc": MulticlassAccuracy(vocab, average="micro", ignore_index=PAD),
                "exact_match": MeanMetric(),
            }
        )
        self.evaluated_by(metrics)

    def forward(
        self, batch: Batch, need_weights: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        return self.model(batch.src, batch.src_len, need_weights=need_weights)

    @staticmethod
    def loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1), given(batch.tgt, "targets").flatten(), ignore_index=PAD)

    def _evaluate(self, batch: Batch, stage: str) -> None:
        logits, _ = self(batch)
        metrics = self.metrics_of(stage)
        size, tgt = len(batch.src), given(batch.tgt, "targets")
        targets = tgt != PAD
        metrics["loss"].update(self.loss(logits, batch), weight=targets.sum().float())
        wrong = (logits.argmax(-1) != tgt) & targets
        metrics["acc"].update(logits.flatten(0, 1), tgt.flatten())
        metrics["exact_match"].update((~wrong.any(1)).float())
        self.log_metrics(metrics, size, stage)
