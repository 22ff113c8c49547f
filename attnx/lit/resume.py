"""`ExactResume`: a run resumed from a checkpoint goes on as the interrupted run would have.

Lightning restores weights, optimiser, scheduler, loop counters and callbacks. Two more things decide
what a run does next, and this callback carries them:

- the training loader's position within the epoch (`attnx.tasks.base.ResumableLoader`): Lightning
  saves it, but 2.6 never loads it back when `configure_optimizers` asked for
  `trainer.estimated_stepping_batches` (attnx's schedule does), which builds the loader before the
  checkpoint is read (Lightning issue #20550); the resumed epoch would replay its first batches;
- the random number generators (dropout): kept in every checkpoint, for every DDP rank, since each
  rank's have drawn for batches of other shapes.

Both are put back at `on_train_start`, the last hook before the first batch: the loader's iterator
exists by then but has not started, and nothing of the restore itself (sanity validation, say) draws
from the generators afterwards.
"""

from __future__ import annotations

import random
from typing import Any, cast

import lightning.pytorch as pl
import numpy as np
import torch
import torch.distributed as dist

KEY = "attnx_rng_states"  # a checkpoint's list of generator states, one per rank


class ExactResume(pl.Callback):
    """Saves each process's torch (CPU and CUDA), NumPy and Python generator states in every checkpoint
    (gathered from all ranks: they save together, as they always do) and, when training resumes, puts
    them and the training loader's saved position back."""

    def __init__(self) -> None:
        self._loaded: list[dict[str, Any]] | None = None

    def on_save_checkpoint(self, trainer: pl.Trainer, module: pl.LightningModule, checkpoint: dict) -> None:
        state = _collect()
        if trainer.world_size > 1 and dist.is_initialized():
            states: list[Any] = [None] * trainer.world_size
            dist.all_gather_object(states, state)
        else:
            states = [state]
        checkpoint[KEY] = states

    def on_load_checkpoint(self, trainer: pl.Trainer, module: pl.LightningModule, checkpoint: dict) -> None:
        self._loaded = checkpoint.get(KEY)  # None in a checkpoint of an older attnx

    def on_train_start(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        trainer.fit_loop._load_combined_loader_states()  # a no-op unless restarting with states pending
        if self._loaded and trainer.global_rank < len(self._loaded):
            _restore(self._loaded[trainer.global_rank])
        self._loaded = None


def _collect() -> dict[str, Any]:
    """This process's generator states, as types a `weights_only` load accepts."""
    state = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state())  # legacy: the tuple
    name, keys, position, has_gauss, gauss = state
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss),
        "python": random.getstate(),
    }


def _restore(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    name, keys, position, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, gauss))
    random.setstate(state["python"])
