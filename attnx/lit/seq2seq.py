"""Sequence-to-sequence: teacher-forced loss and perplexity; accuracy measured on decoded outputs.

Token accuracy and exact match compare the *decoded* output (greedy, or beam search when
`decode.beam_size > 1`) with the reference, position by position up to and including EOS, so
they measure what the model produces, not what it predicts with the reference fed in. Tasks add
metrics of the decoded text (BLEU, chrF, PER/WER, ...) through `Task.text_metrics()`; those read
the task's raw references, which may be several per example and keep words the vocabulary lacks.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.text import Perplexity

from attnx import registry
from attnx.lit.metrics import ByLength
from attnx.lit.module import AttnxModule, given
from attnx.models.seq2seq import Seq2Seq
from attnx.models.sites import Sites
from attnx.models.spec import ModelSpec
from attnx.tasks.base import Batch, Task
from attnx.vocab import PAD, Vocab


class Seq2SeqModule(AttnxModule):
    def __init__(self, spec: ModelSpec, sites: Sites | None = None) -> None:
        super().__init__(spec, sites)
        # every metric a torchmetrics Metric, the loss too: under DDP each is reduced over all ranks'
        # examples when computed (torchmetrics' sync), so it is the split's whatever the number of ranks
        metrics = MetricCollection(
            {
                "loss": MeanMetric(),  # per target token, as perplexity: log(perplexity)
                "token_acc": MeanMetric(),
                "exact_match": MeanMetric(),
                "perplexity": Perplexity(ignore_index=PAD),
            }
        )
        self.evaluated_by(metrics)
        # exact match per source length over every test split, slices included: results.json's by_length
        self.test_by_length = ByLength()
        # An unbuilt task (cheap: no data) says which text metrics apply and how outputs read as text.
        self.task: Task = registry.build("task", spec.task)
        self.tgt_vocab = Vocab(spec.tgt_itos or [])
        text = self.task.text_metrics()
        self.text: nn.ModuleDict | None = None
        if text:  # a copy per split
            each = MetricCollection(text, compute_groups=False)
            self.text = nn.ModuleDict({s: each.clone(prefix=f"{s}/") for s in ["val", *self.test_splits]})
        self.target_tokens: float | None = None  # set by on_fit_start, for train_loss

    def forward(self, batch: Batch, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Teacher-forced logits [B, U, V] for targets tgt[:, 1:] given tgt[:, :-1].

        Weights are off by default: they force multi_head off the fused SDPA kernel."""
        return self.model(
            batch.src, batch.src_len, given(batch.tgt, "targets")[:, :-1], need_weights=need_weights
        )

    def loss(self, logits: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Cross-entropy per target token (what val/test log, and perplexity exponentiates)."""
        return F.cross_entropy(
            logits.flatten(0, 1), given(batch.tgt, "targets")[:, 1:].flatten(), ignore_index=PAD
        )

    def on_fit_start(self) -> None:
        task = getattr(getattr(self.trainer, "datamodule", None), "task", None)
        self.target_tokens = float((task.splits["train"].tgt_len - 1).double().mean()) if task else None

    def train_loss(self, logits: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Cross-entropy summed over the batch's target tokens / (B · the training split's mean target
        tokens per example): every token weighs the same in every batch, and the value is the
        per-token loss in expectation. The per-token mean of each batch (`loss`) weighs a token by
        1 / its batch's token count, so bucketed batches of short targets would count as much as
        batches of long ones, and long targets would train less (benchmarks/README.md §9)."""
        if self.target_tokens is None:  # plain dataloaders: no split to take the mean from
            return self.loss(logits, batch)
        total = F.cross_entropy(
            logits.flatten(0, 1),
            given(batch.tgt, "targets")[:, 1:].flatten(),
            ignore_index=PAD,
            reduction="sum",
        )
        return total / (len(batch.src) * self.target_tokens)

    def decode(self, src: torch.Tensor, src_len: torch.Tensor) -> torch.Tensor:
        """Output token ids [B, L] by the configured decoder (greedy or beam search)."""
        cfg, model = self.spec.decode, cast(Seq2Seq, self.model)
        max_len = int(cfg["max_len_ratio"] * int(src_len.max())) + 5
        if cfg["beam_size"] > 1:
            tokens, _ = model.beam_search(
                src, src_len, max_len, beam_size=cfg["beam_size"], length_penalty=cfg["length_penalty"]
            )
        else:
            tokens, _ = model.greedy(src, src_len, max_len)
        return tokens

    def _evaluate(self, batch: Batch, stage: str) -> None:
        logits, _ = self(batch)
        target = given(batch.tgt, "targets")[:, 1:]
        metrics = self.metrics_of(stage)
        size = len(batch.src)
        real = target != PAD
        metrics["loss"].update(self.loss(logits, batch), weight=real.sum().float())
        metrics["perplexity"].update(logits, target)

        decoded = self.decode(batch.src, batch.src_len)
        width = target.shape[1]
        predicted = F.pad(decoded, (0, max(0, width - decoded.shape[1])), value=PAD)[:, :width]
        correct = (predicted == target) & real
        metrics["token_acc"].update(correct[real].float())
        exact = (correct.sum(1) == real.sum(1)).float()
        metrics["exact_match"].update(exact)
        if stage != "val":
            self.test_by_length.update(batch.src_len, exact)
        self.log_metrics(metrics, size, stage)

        text_metrics = self.text_metrics_of(stage)
        if text_metrics is not None:
            hypotheses = [self.task.detokenize(self.tgt_vocab.decode(row)) for row in decoded.tolist()]
            text_metrics.update(hypotheses, self.references(batch, stage))
            self.log_metrics(text_metrics, size, stage)

    def text_metrics_of(self, stage: str) -> MetricCollection | None:
        return None if self.text is None else cast(MetricCollection, self.text[stage])

    def by_length(self) -> dict[str, dict[int, float] | dict[int, int]]:
        """Exact match and examples at each source length over every test split, its slices too (after
        `trainer.test`): the curve runs on past the training lengths."""
        return {"test/exact_match": self.test_by_length.compute(), "examples": self.test_by_length.counts()}

    def references(self, batch: Batch, stage: str) -> list[list[str]]:
        """The batch's references from the trainer's task; without a datamodule (plain dataloaders)
        only the target ids are at hand, read back as text."""
        task = getattr(getattr(self.trainer, "datamodule", None), "task", None)
        if task is not None and batch.index is not None:
            references: list[list[str]] = task.references(stage, batch.index)
            return references
        rows = given(batch.tgt, "targets")[:, 1:].tolist()
        return [[self.task.detokenize(self.tgt_vocab.decode(row))] for row in rows]
