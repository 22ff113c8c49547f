"""`SaveOnInterrupt`: after SIGTERM/SIGINT (attnx.track.signals), stop at the next training batch end
where the run can go on exactly, and save `last.ckpt`, which `resume=auto` continues from.

Where a run may stop during `fit`: at a training batch end after which no validation is due. A
checkpoint from inside a validation, or from the batch end just before one, would make Lightning
(2.6) skip that validation on resume (it reads the validation as done), so its metrics would never
be logged, checkpointed or monitored: a resumed run would differ from an uninterrupted one. A signal
that comes then waits for the validation to end and for one more training batch (or, when training
ends with that validation, for `validate`/`test`, which stop at their next batch end without saving:
`last.ckpt` is then the end of training). With the training loader's position and the generators'
states in the checkpoint (attnx.lit.resume), the resumed run then equals an uninterrupted one.

SIGTERM is attnx's alone inside the loops: Lightning's own handler makes its loops raise
`SIGTERMException` in the middle of a validation, and under DDP (2.6) broadcasts from inside the
signal handler, a collective out of step with the other ranks', which deadlocks the run. Under DDP
the ranks decide together, at every batch end: a signal to any of them (a `kill` reaches one process,
SLURM's signals reach all, at different moments) stops all of them after the same batch, so they save
the checkpoint together and none is left waiting in a collective for the others.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.trainer.states import TrainerFn

from attnx.track.signals import Interrupted, Signals


class SaveOnInterrupt(pl.Callback):
    """Raise `Interrupted` at a batch end after a signal, and save `<dirpath>/last.ckpt` on the way out
    of `fit`."""

    def __init__(self, signals: Signals, dirpath: str | Path) -> None:
        self.signals = signals
        self.path = Path(dirpath) / "last.ckpt"
        self.saved: str | None = None  # the checkpoint written on interruption
        self._at_boundary = False  # whether this callback raised, at a batch end: state there is whole

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.signals.in_loop = True

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.signals.in_loop = False

    def _own_sigterm(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # each stage's loop starts after Lightning has put its SIGTERM handler in front of attnx's
        # (and its teardown puts attnx's back)
        self.signals.take(signal.SIGTERM)

    on_train_start = on_validation_start = on_test_start = _own_sigterm

    def on_train_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        signum = self._received(trainer)
        # whether a validation is due: Lightning's own predicate, which its epoch loop asks after this hook
        fetcher = trainer.fit_loop._data_fetcher
        if signum and fetcher is not None and not trainer.fit_loop.epoch_loop._should_check_val_fx(fetcher):
            self._stop(signum)

    def on_validation_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        if trainer.state.fn != TrainerFn.FITTING:  # inside fit, validation runs to its end
            self._stop(self._received(trainer))

    def on_test_batch_end(self, trainer: pl.Trainer, *_: Any) -> None:
        self._stop(self._received(trainer))

    def _received(self, trainer: pl.Trainer) -> int:
        """The signal this process or, under DDP, any rank has received; 0 for none."""
        signum = self.signals.received or 0
        if trainer.world_size > 1:
            received = torch.tensor(signum, device=trainer.strategy.root_device)
            signum = int(trainer.strategy.reduce(received, reduce_op="max"))
        return signum

    def _stop(self, signum: int) -> None:
        if signum:
            self._at_boundary = True
            raise Interrupted(signum)

    def on_exception(self, trainer: pl.Trainer, module: pl.LightningModule, exception: BaseException) -> None:
        # only where this callback stopped the run: the state is whole there. An Interrupted raised by
        # the handler before the loops start, or Lightning's SIGTERMException for a SIGTERM that came
        # before attnx took the signal over (it may be mid-validation), leave last.ckpt as it was
        if self._at_boundary and trainer.state.fn == TrainerFn.FITTING:
            trainer.save_checkpoint(self.path, weights_only=False)  # all of it: the run goes on from here
            self.saved = str(self.path)
