"""SIGTERM and SIGINT end a run cleanly, at a point where its state is whole.

SIGTERM is what SLURM sends on pre-emption and at a time limit, SIGINT is Ctrl+C. `Signals` owns both
for the whole run. Inside the Trainer's loops (attnx.lit.interrupt.SaveOnInterrupt says when) a
signal only sets a flag, and the callback raises `Interrupted` at the next batch end, where the
weights and the optimiser agree, and saves `last.ckpt` on the way out. (Between epochs Lightning's
own loops notice a SIGTERM first and raise `SIGTERMException`; attnx.train records it the same way.)
Outside the loops (building the data, say) there is nothing to save and the handler raises at once.
A second signal while saving is ignored, as Lightning does for Ctrl+C.

SIGUSR1/SIGUSR2, which SLURM can send before a time limit, are left to one owner: submitit, which
requeues the job (attnx.train turns Lightning's own SLURM requeue off).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

HANDLED = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """A run stopped by a signal. A BaseException, so no `except Exception` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 143 for SIGTERM, 130 for SIGINT


class Signals:
    """Context manager installing the handlers (main thread only: Python delivers signals there)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.in_loop = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in HANDLED}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def take(self, signum: int) -> None:
        """Make this object's handler `signum`'s again, over one installed since `__enter__`."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            return
        self.received = signum
        if not self.in_loop:
            raise Interrupted(signum)
