"""`SaveOnInterrupt`: after SIGTERM/SIGINT (attnx.track.signals), stop at the next batch end and save
`last.ckpt`, which `resume=auto` continues from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.utilities.exceptions import SIGTERMException

from attnx.track.signals import Interrupted, Signals


class SaveOnInterrupt(pl.Callback):
    """Raise `Interrupted` at the batch end after a signal, and save `<dirpath>/last.ckpt` on the way out."""

    def __init__(self, signals: Signals, dirpath: str | Path) -> None:
        self.signals = signals
        self.path = Path(dirpath) / "last.ckpt"
        self.saved: str | None = None  # the checkpoint written on interruption
        self._at_boundary = False  # whether this callback raised, at a batch end: state there is whole

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.signals.in_loop = True

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.signals.in_loop = False

    def _check(self, *_: Any) -> None:
        if self.signals.received is not None:
            self._at_boundary = True
            raise Interrupted(self.signals.received)

    on_train_batch_end = on_validation_batch_end = on_test_batch_end = _check

    def on_exception(self, trainer: pl.Trainer, module: pl.LightningModule, exception: BaseException) -> None:
        # Lightning's own SIGTERM handling raises SIGTERMException at the same boundaries; an
        # Interrupted from the handler itself (during a checkpoint restore, say) must not overwrite last.ckpt
        at_boundary = isinstance(exception, SIGTERMException) or (
            isinstance(exception, Interrupted) and self._at_boundary
        )
        if at_boundary and trainer.state.fn == "fit":
            trainer.save_checkpoint(self.path)
            self.saved = str(self.path)
