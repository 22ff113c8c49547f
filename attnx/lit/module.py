"""What every attnx LightningModule shares: model assembly, the configured optimiser and schedule,
throughput, RNG state, compiled regions."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import lightning.pytorch as pl
import torch
from hydra.utils import instantiate
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig
from torch import nn
from torchmetrics import MetricCollection

from attnx.lit.optim import param_groups
from attnx.models.assembly import model_from_spec
from attnx.models.sites import Sites
from attnx.models.spec import ModelSpec
from attnx.nn.fusion import compile_regions, regions_of, stats
from attnx.tasks.base import slice_names

# `compile: auto` compiles a run of at least this many training steps. The rnn regions save 3-8 ms a
# step at the quick suite's sizes (1.1-1.3x) against 4-7 s of compiling from a warm cache and 20-290 s
# from a cold one (benchmarks/README.md, "Compiled regions"): at 5000 steps a run repays a warm compile
# several times over, and the first run of a sweep's configuration, which compiles cold for the rest,
# is repaid within the sweep. Shorter runs, the quick suite's included, stay eager.
AUTO_MIN_STEPS = 5000


def compiles(policy: bool | str, steps: Callable[[], float]) -> bool:
    """Whether a run of `steps()` training steps compiles its regions under `compile: policy`."""
    return policy is True or (policy == "auto" and steps() >= AUTO_MIN_STEPS)


class NonFiniteLoss(ArithmeticError):
    """The training loss became NaN or infinite; the run stops before that step's update."""


def given(field: torch.Tensor | None, name: str) -> torch.Tensor:
    """A batch's optional field (`tgt`, `label`) that every batch of a model type's tasks carries."""
    if field is None:
        raise ValueError(f"a batch without {name}, which this model trains on")
    return field


class AttnxModule(pl.LightningModule):
    """Builds the model from a `ModelSpec` and owns the optimiser.

    The spec is everything needed to rebuild the model without the data; checkpoints store it as
    versioned plain data (`ModelSpec.to_dict`), so `attnx predict` loads them with `weights_only=True`.
    `sites` are the spec's attention sites when config validation has resolved them already; the heatmaps
    name each map's mechanism by them.

    The test stage has a loader per test split: `test`, then each slice of the task's `test_slices`
    (`test@2x`, ...), whose metrics are logged under its own prefix (`test@2x/exact_match`), so the
    headline `test/` metrics never mix in-distribution and longer sequences.
    """

    def __init__(self, spec: ModelSpec, sites: Sites | None = None) -> None:
        super().__init__()
        self.spec = spec
        self.sites = Sites.of(spec) if sites is None else sites
        self.model: nn.Module = model_from_spec(spec, self.sites)
        self.test_splits = ["test", *slice_names(spec.task)]  # the test loaders' splits, in order
        self.train_samples = 0
        self.train_seconds = 0.0
        self._fit_started: float | None = None  # while fitting: when this stretch of it began

    def evaluated_by(self, metrics: MetricCollection) -> None:
        """`metrics` cloned for validation (`val/`) and for each test split (`test/`, `test@2x/`, ...):
        exactly the metrics its model type declares (`attnx.registry.model_types`), which configuration,
        preflight and compare's checks read without building a module."""
        logged, declared = (
            sorted(map(str, metrics.keys())),
            sorted(m.name for m in self.spec.declared.metrics),
        )
        if logged != declared:
            raise TypeError(
                f"{type(self).__name__} logs {logged}, but model type {self.spec.model_type} declares "
                f"{declared}: the declaration must say what the module logs"
            )
        self.val_metrics = metrics.clone(prefix="val/")
        self.test_metrics = nn.ModuleDict(
            {split: metrics.clone(prefix=f"{split}/") for split in self.test_splits}
        )

    def metrics_of(self, stage: str) -> MetricCollection:
        """The metrics of `val` or of one test split."""
        return cast(MetricCollection, self.val_metrics if stage == "val" else self.test_metrics[stage])

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def logged_metrics(self, stage: str = "val") -> list[str]:
        """The names a validation (`val/loss`, ...: what a callback may monitor) or a test (`test/...`
        and each slice's `test@2x/...`: what results.json reports) logs."""
        splits = ["val"] if stage == "val" else self.test_splits
        collections = [
            c for s in splits for c in (self.metrics_of(s), self.text_metrics_of(s)) if c is not None
        ]
        return sorted(str(name) for metrics in collections for name in metrics)

    def text_metrics_of(self, stage: str) -> MetricCollection | None:
        """A split's metrics of decoded text, for modules that have them (seq2seq)."""
        return None

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        """The `optim.optimizer` partial on `param_groups`, stepped each batch by the `optim.scheduler`
        partial over the run's `trainer.estimated_stepping_batches`."""
        optim = self.spec.optim
        # _convert_="all": plain lists (AdamW's betas), not ListConfigs, in the optimiser's and the
        # schedule's state, which checkpoints store and `attnx predict` reads with weights_only=True
        optimizer = instantiate(optim["optimizer"], _convert_="all")(param_groups(self))
        total = max(1, int(self.trainer.estimated_stepping_batches))
        scheduler = instantiate(optim["scheduler"], _convert_="all")(optimizer, total_steps=total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def loss(self, logits: torch.Tensor, batch: Any) -> torch.Tensor:
        """The training objective of the model's output for a batch."""
        raise NotImplementedError

    def train_loss(self, logits: torch.Tensor, batch: Any) -> torch.Tensor:
        """The objective minimised in training: `loss` unless a module weighs batches differently."""
        return self.loss(logits, batch)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        logits, _ = self(batch)
        loss = self.train_loss(logits, batch)
        self.train_samples += len(batch.src)
        self.log_step("train/loss", loss, batch_size=len(batch.src))
        return loss

    def _evaluate(self, batch: Any, stage: str) -> None:
        """Log `stage`/loss and update `stage`'s metrics for one batch."""
        raise NotImplementedError

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._evaluate(batch, self.test_splits[dataloader_idx])

    def log_metrics(self, metrics: MetricCollection, batch_size: int, stage: str) -> None:
        """Log a split's metrics under their own prefixes: no `/dataloader_idx_N` suffix, which Lightning
        adds by default when the test stage has several loaders."""
        self.log_dict(metrics, batch_size=batch_size, prog_bar=stage == "val", add_dataloader_idx=False)

    def setup(self, stage: str) -> None:
        """Compile the model's fusable regions for training (`attnx.nn.fusion`) as `compile` says: true
        always, auto when the run trains for `AUTO_MIN_STEPS` or more. Not for predict or evaluation-only
        runs, where a compile (seconds to a minute on CPU) outweighs a few batches."""
        if stage == "fit" and compiles(self.spec.compile, lambda: self.trainer.estimated_stepping_batches):
            compile_regions(self.model)

    def compile_record(self) -> dict[str, Any] | None:
        """results.json's `compile`: each region compiled (and its graphs) or eager and why, and what
        compiling cost (`attnx.nn.fusion.stats`); None when nothing was compiled."""
        regions = regions_of(self.model)
        if not regions:
            return None
        return {"regions": {name: region.record() for name, region in regions.items()}, **stats()}

    def log_step(self, name: str, value: torch.Tensor, batch_size: int) -> None:
        """`self.log` a training-step value (shown on the progress bar) only on the steps whose values
        the loggers write (every `trainer.log_every_n_steps`, as Lightning decides): each `self.log`
        call costs Lightning about half a millisecond on CPU, 5% of a small model's step
        (benchmarks/README.md). Logged values are unchanged; the progress bar's figure follows them."""
        trainer = self._trainer
        every = getattr(trainer, "log_every_n_steps", 0)  # Lightning's logger connector sets it
        if trainer is None or not every:  # a step called outside fit, or logging off
            return
        if (self.global_step + 1) % every == 0 or trainer.should_stop:
            self.log(name, value, prog_bar=True, batch_size=batch_size)

    def on_before_backward(self, loss: torch.Tensor) -> None:
        # before backward, so the weights and last.ckpt never take a non-finite update
        if not bool(torch.isfinite(loss)):
            raise NonFiniteLoss(f"non-finite loss at step {self.global_step}")

    def on_train_start(self) -> None:
        self._fit_started = time.perf_counter()

    def on_train_end(self) -> None:
        self.train_seconds += self._fitting()
        self._fit_started = None

    def _fitting(self) -> float:
        """Seconds since this stretch of fitting began (0 outside one)."""
        return 0.0 if self._fit_started is None else time.perf_counter() - self._fit_started

    # the generators' states, which a resume needs too, are attnx.lit.resume.ExactResume's
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["attnx_spec"] = self.spec.to_dict()
        # a resumed or continued run's train_seconds counts the whole run, not only its last stretch
        checkpoint["attnx_train_seconds"] = self.train_seconds + self._fitting()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.trainer.state.fn == TrainerFn.FITTING:  # resuming; evaluating a checkpoint leaves the count
            self.train_seconds = float(checkpoint.get("attnx_train_seconds", 0.0))
