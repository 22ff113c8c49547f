"""`SaveOnInterrupt`: after SIGTERM/SIGINT (attnx.track.signals), stop at the next batch end and save
`last.ckpt`, which `resume=auto` continues from.

Under DDP the ranks decide together, at every batch end: a signal to any of them (a `kill` reaches one
process, SLURM's signals reach all, at different moments) stops all of them after the same batch, so
they save the checkpoint together and none is left waiting in a collective for the others. There
attnx's handler is SIGTERM's only one: Lightning's (2.6) broadcasts from inside the signal handler, a
collective out of step with the other ranks', which deadlocks the run.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
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

    def _own_sigterm(self, trainer: pl.Trainer, *_: Any) -> None:
        # each stage's loop starts after Lightning has put its SIGTERM handler in front of attnx's
        # (and its teardown puts attnx's back)
        if trainer.world_size > 1:
            self.signals.take(signal.SIGTERM)

    on_train_start = on_validation_start = on_test_start = _own_sigterm

    def _check(self, trainer: pl.Trainer, *_: Any) -> None:
        signum = self.signals.received or 0
        if trainer.world_size > 1:
            received = torch.tensor(signum, device=trainer.strategy.root_device)
            signum = int(trainer.strategy.reduce(received, reduce_op="max"))
        if signum:
            self._at_boundary = True
            raise Interrupted(signum)

    on_train_batch_end = on_validation_batch_end = on_test_batch_end = _check

    def on_exception(self, trainer: pl.Trainer, module: pl.LightningModule, exception: BaseException) -> None:
        # Lightning's own SIGTERM handling raises SIGTERMException at the same boundaries; an
        # Interrupted from the handler itself (during a checkpoint restore, say) must not overwrite last.ckpt
        at_boundary = isinstance(exception, SIGTERMException) or (
            isinstance(exception, Interrupted) and self._at_boundary
        )
        if at_boundary and trainer.state.fn == "fit":
            trainer.save_checkpoint(self.path, weights_only=False)  # all of it: the run goes on from here
            self.saved = str(self.path)
