"""Checkpoints you can trust: written whole or not at all, checked before they are loaded.

`VerifiedCheckpointIO` is the Trainer's checkpoint plugin (Lightning's `CheckpointIO`), so every
checkpoint Lightning writes (best, last, on interruption) and reads (resume, validate/test on the best)
goes through it:

- a checkpoint is serialised in memory, written to `NAME.tmp`, flushed to disk and renamed over `NAME`:
  a crash or a full disk never leaves a partial file under a checkpoint's name;
- its SHA-256 is written next to it (`NAME.sha256`), and a load whose bytes do not match is refused:
  torch's zip reader does not check CRCs, so flipped bytes in the middle of a file would otherwise load;
- it is read with `weights_only=True` always, passed explicitly, so `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`
  cannot turn on pickle execution;
- weights and optimiser state must be finite.

`newest_good` picks the checkpoint that `resume=auto` continues from, skipping broken ones.
`known_validation` spares a run validating its best checkpoint again when fit's last validation was of
those very weights (`LastValidation`).
"""

from __future__ import annotations

import hashlib
import io
import pickle
import re
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from attnx.track.results import moved, unwritable, write_atomically

CHECKSUM = ".sha256"


class CheckpointError(ValueError):
    """A checkpoint that cannot be trusted; the message names the file and the reason."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


class CheckpointWriteError(OSError):
    """A checkpoint that could not be written (disk full, read-only folder); nothing partial is left."""


class VerifiedCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint I/O with atomic writes, checksums and verified, safe loads. `saved_at`:
    the global step each checkpoint this process wrote was taken at, by path. `preloaded`: checkpoints
    verified already (a run's `ckpt_path`, the one `resume=auto` chose), by path, each handed to
    Lightning's first load of it instead of reading and verifying the file again."""

    def __init__(self, preloaded: dict[str, dict[str, Any]] | None = None) -> None:
        super().__init__()
        self.saved_at: dict[str, int] = {}
        self.preloaded = dict(preloaded or {})

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        data = buffer.getvalue()
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, data)
            write_atomically(_checksum_path(path), (hashlib.sha256(data).hexdigest() + "\n").encode())
        except OSError as error:
            reason = error.strerror or error
            raise CheckpointWriteError(f"could not write checkpoint {path}: {reason}") from None
        self.saved_at[str(path)] = checkpoint.get("global_step", -1)

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: Any = None) -> dict:
        found = self.preloaded.pop(str(path), None)
        return found if found is not None else load(path)  # always weights_only=True, whatever asked

    def remove_checkpoint(self, path: Any) -> None:
        self.saved_at.pop(str(path), None)
        for file in (Path(path), _checksum_path(Path(path))):
            file.unlink(missing_ok=True)


class LastValidation(pl.Callback):
    """The metrics of fit's latest validation (all `val/` keys, as `trainer.validate` returns them) and
    the global step it ran at: the weights it measured are those of a checkpoint saved at that step."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.metrics: dict[str, torch.Tensor] = {}

    def on_validation_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        self.step = trainer.global_step
        self.metrics = {k: v.clone() for k, v in trainer.callback_metrics.items() if k.startswith("val/")}


def known_validation(trainer: pl.Trainer, path: str | None) -> dict[str, torch.Tensor] | None:
    """What `trainer.validate(ckpt_path=path)` would measure, when fit's last validation already did:
    `path` was written by this process at the step of that validation, so it holds the weights measured
    (the module's evaluation is deterministic; val metrics depend on nothing else). None otherwise: a
    checkpoint of an earlier validation, one from before a resume, no checkpoint, or DDP, whose other
    ranks never write checkpoints and so could not tell."""
    io = trainer.strategy.checkpoint_io
    callbacks = trainer.callbacks  # type: ignore[attr-defined]  # set by Lightning, undeclared
    last = next((c for c in callbacks if isinstance(c, LastValidation)), None)
    if path is None or last is None or last.step is None or trainer.world_size != 1:
        return None
    if not isinstance(io, VerifiedCheckpointIO) or io.saved_at.get(str(path)) != last.step:
        return None
    return last.metrics


def check_writable(folder: Path) -> None:
    """Fail now, not after the first epoch, when checkpoints cannot be written into `folder`."""
    why = unwritable(folder)
    if why is not None:
        raise CheckpointWriteError(f"checkpoint folder {folder} is not writable: {why}")


def load(path: str | Path) -> dict[str, Any]:
    """A verified checkpoint's contents (on the CPU), or a CheckpointError saying what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(path, "a folder, not a file" if path.is_dir() else "no such file")
    data = path.read_bytes()
    expected = _checksum_path(path)
    if expected.is_file() and hashlib.sha256(data).hexdigest() != expected.read_text().strip():
        raise CheckpointError(path, "checksum mismatch, the file is corrupt")
    if not data.startswith(b"PK\x03\x04"):  # torch.save's zip archive
        raise CheckpointError(path, "not a torch checkpoint (no zip archive)" if data else "an empty file")
    try:
        checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        found = re.search(r"GLOBAL (\S+)", str(error))
        code = f": {found.group(1)}" if found else ""
        raise CheckpointError(path, f"refused, it holds code that loading would run{code}") from None
    except Exception as error:  # torch raises RuntimeError, OSError, EOFError... for a damaged archive
        raise CheckpointError(path, f"a damaged or truncated archive ({type(error).__name__})") from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointError(path, "not a Lightning checkpoint (no state_dict)")
    for where, key in (("weights", "state_dict"), ("optimizer state", "optimizer_states")):
        if not _finite(checkpoint.get(key)):
            raise CheckpointError(path, f"non-finite values in its {where}")
    return checkpoint


def newest_good(folder: Path) -> tuple[Path | None, dict[str, Any] | None, list[str]]:
    """The newest checkpoint in `folder` that loads and verifies, its contents, and one line per newer one
    that did not."""
    candidates = sorted(folder.glob("*.ckpt"), key=lambda p: (p.stat().st_mtime, p.name == "last.ckpt"))
    rejected = []
    for path in reversed(candidates):
        try:
            checkpoint = load(path)
        except CheckpointError as error:
            rejected.append(str(error))
            continue
        return path, checkpoint, rejected
    return None, None, rejected


def rebased(checkpoint: dict[str, Any], folder: Path) -> None:
    """`checkpoint`'s callback states, written by a run in another folder (one taken from the run store, a
    folder moved), made those of a run in `folder`, in place. ModelCheckpoint reloads its best score and
    top k only when its `dirpath` is unchanged; without them the resumed run would choose its best
    checkpoint otherwise than the run it continues. Only the states of callbacks that wrote into a folder
    of `folder`'s name are moved: another ModelCheckpoint's folder is its own."""
    for name, state in (checkpoint.get("callbacks") or {}).items():
        before = state.get("dirpath") if isinstance(state, dict) else None
        if before and Path(before) != folder and Path(before).name == folder.name:
            checkpoint["callbacks"][name] = moved(state, str(before), str(folder))


def _finite(tree: Any) -> bool:
    if isinstance(tree, torch.Tensor):
        return not tree.is_floating_point() or bool(torch.isfinite(tree).all())
    if isinstance(tree, dict):
        tree = list(tree.values())
    return all(_finite(v) for v in tree) if isinstance(tree, (list, tuple)) else True


def _checksum_path(path: Path) -> Path:
    return path.with_name(path.name + CHECKSUM)
