"""SIGTERM and SIGINT end a run cleanly, at a point where its state is whole.

SIGTERM is what SLURM sends on pre-emption and at a time limit, SIGINT is Ctrl+C. `Signals` owns both
for the whole run. Inside the Trainer's loops (attnx.lit.interrupt.SaveOnInterrupt says when) a
signal only sets a flag, and the callback raises `Interrupted` at the next training batch end from
which a resumed run goes on exactly as an uninterrupted one (not inside a validation, nor just before
one), and saves `last.ckpt` on the way out.
Outside the loops (building the data, say) there is nothing to save and the handler raises at once.
A second signal while saving is ignored, as Lightning does for Ctrl+C.

The signal SLURM sends before a time limit (`--signal`, SIGUSR2 under submitit) has one owner:
submitit, whose handler decides whether to requeue the job (a time-out counts against
`max_num_timeout`, a pre-emption does not), requeues it and exits. Lightning's own SLURM requeueing is
off (attnx.train.run passes `SLURMEnvironment(auto_requeue=False)`). Left alone, submitit's handler would
exit wherever the signal lands, mid-step; so when a handler is already installed for SIGUSR1 or
SIGUSR2, `Signals` takes that signal like SIGTERM (stop at the next batch end, save `last.ckpt`,
record `interrupted`) and calls the installed handler once the run has stopped, on the way out of
the `with` block. The requeued job continues from `last.ckpt` with `resume=auto`.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

HANDLED = (signal.SIGTERM, signal.SIGINT)
HANDED_ON = (signal.SIGUSR1, signal.SIGUSR2)  # to the handler installed before, when there is one


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
            taken = [*HANDLED, *(s for s in HANDED_ON if callable(signal.getsignal(s)))]
            self._previous = {s: signal.signal(s, self._handle) for s in taken}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        if self.received in HANDED_ON and self.received in self._previous:
            self._previous[self.received](self.received, None)  # submitit's: requeue, then exit

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
