"""`Convergence`: a run's validation curve, its verdict (attnx.track.convergence) and, with
`convergence.stop`, an early stop once the curve so far has converged. For a metric its declaration calls a
proportion (`Metric.proportion`: accuracy, exact match), the rule's noise estimate includes the binomial
error of a share of the validation split's examples, whose number the callback reads from the trainer's
validation loader (and keeps in its state, so a resumed run knows it before its first validation).

After each validation of fit (not the sanity check, not `trainer.validate`) every logged `val/*` metric's
(global_step, value) is appended to `curve`. The curve is the callback's state, so checkpoints carry it
and a resumed run's curve is the one before the interruption followed by the one after.

The stop is Lightning's `EarlyStopping` with its criterion replaced: its should_stop plumbing (every DDP
rank stops when one decides to), its verbose message and its checkpointed state are reused. Its own
criterion (best value so far, `min_delta`, `patience`) is not enough to judge a plateau: it follows the
noise's extremes, not the trend, since on a flat but noisy curve each new high outlier restarts its
patience, and on a rising one an early high outlier can exhaust it; and its patience is a fixed count
of validations, not a share of the run. Here the last quarter of the curve is compared with the quarter
before it, by their means, and a run stops on a plateau only once it has had `min_validations`
validations (on reaching the ceiling, at once): a run stopped early is converged by the same rule that
results.json records.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason
from torch import Tensor

from attnx.track.convergence import convergence

# what the rule's reason means in EarlyStopping's own terms (`stopping_reason`)
REASONS = {
    "reached the ceiling": EarlyStoppingReason.STOPPING_THRESHOLD,
    "plateaued": EarlyStoppingReason.PATIENCE_EXHAUSTED,
}


class Convergence(EarlyStopping):
    """Records every validation of fit (`curve`: metric -> [[step, value], ...]) and judges `metric`'s
    curve (`verdict()`), in the direction its declaration gives (`higher_is_better`), against its
    `ceiling` (its best attainable value, or None); with `stop`, stops training once that verdict is
    converged."""

    def __init__(
        self,
        metric: str,
        tolerance: float,
        ceiling: float | None,
        higher_is_better: bool,
        min_validations: int,
        stop: bool,
        proportion: bool = False,
    ) -> None:
        # after each validation, never at a training epoch's end: a run shorter than its first validation
        # (trainer.max_steps under an epoch) has nothing to check, and must not fail on that
        mode = "max" if higher_is_better else "min"
        super().__init__(monitor=metric, mode=mode, verbose=stop, check_on_train_epoch_end=False)
        self.tolerance = tolerance
        self.ceiling = ceiling
        self.min_validations = min_validations
        self.stop = stop
        self.proportion = proportion
        self.examples: int | None = None  # the validation split's size, for a proportion's noise
        self.curve: dict[str, list[list[float]]] = {}

    def verdict(self) -> dict[str, Any]:
        """attnx.track.convergence's verdict on the monitored metric's curve so far."""
        return convergence(
            self.curve.get(self.monitor, []),
            self.tolerance,
            self.ceiling,
            higher_is_better=self.mode == "max",
            min_validations=self.min_validations,
            metric=self.monitor,
            examples=self.examples if self.proportion else None,
        )

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._should_skip_check(trainer):
            self.examples = validation_examples(trainer) or self.examples
            for name, value in trainer.callback_metrics.items():
                if name.startswith("val/"):
                    self.curve.setdefault(name, []).append([trainer.global_step, float(value)])
        super().on_validation_end(trainer, pl_module)

    def _evaluate_stopping_criteria(self, current: Tensor) -> tuple[bool, str | None]:
        verdict = self.verdict()
        # the ceiling is final whenever it comes; a plateau only counts from min_validations on, since
        # attention often sits on one at chance for a while before it learns where to look
        ceiling = verdict["reason"] == "reached the ceiling"
        if (
            not self.stop
            or not verdict["converged"]
            or (verdict["validations"] < self.min_validations and not ceiling)
        ):
            return False, None
        self.stopping_reason = REASONS[verdict["reason"]]
        return True, f"{self.monitor} {verdict['reason']} ({verdict['validations']} validations): stopping"

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "curve": self.curve, "examples": self.examples}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.curve = state_dict.get("curve", {})
        self.examples = state_dict.get("examples")


def validation_examples(trainer: pl.Trainer) -> int | None:
    """The validation split's examples, all ranks' together (each rank loads its share of every batch, and
    the logged metric is synchronised over them); None where the loader has no sized dataset."""
    loaders = trainer.val_dataloaders
    loader = loaders[0] if isinstance(loaders, list | tuple) and loaders else loaders
    try:
        return len(loader.dataset)  # type: ignore[union-attr]
    except (AttributeError, TypeError):
        return None
