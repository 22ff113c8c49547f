"""DDP for real: `trainer=ddp_cpu` runs two gloo processes (rank 0 in this process, rank 1 started by
attnx.train.distributed) that share each batch, reduce their metrics with torchmetrics and leave one record.
The GPU twin, `trainer=ddp`, is checked where CUDA is."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from lightning.pytorch import Callback, LightningModule, Trainer
from test_faults import ended, launch, record, wait_for

from attnx.track import sweep

from helpers.paths import TESTS
from helpers.tiny import TINY, TINY_MODEL, TINY_RNN, completed, sizes

pytestmark = pytest.mark.engines  # two processes, each importing Lightning, in a gloo process group

# Reversing 2-3 symbols: half the validation sequences right after 2 epochs, so the metrics compared
# below are far from both chance and perfection. No dropout: the two runs then do the same arithmetic.
LEARNS = [
    *TINY_RNN,
    *TINY_MODEL,
    *("encoder.embed_dim=16", "encoder.hidden_dim=32", "decoder.embed_dim=16", "decoder.hidden_dim=32"),
    "task.min_len=2",
    "task.max_len=3",
    *sizes(train=1024, val=65, test=16, batch=32),  # 65: a last validation batch of 1 joins the one before
    "trainer.max_epochs=2",
    "optim.lr=0.01",
    "optim.scheduler.warmup_steps=0",
    "decoder.dropout=0",
    "classifier.dropout=0",
    "callbacks.attention_heatmaps=null",
    "test=false",
]
# One process and two compute the same sums in a different order: float32 rounding apart, nothing else.
TOLERANCE = 1e-5


class Probe(Callback):
    """Leaves `<rank> <world size> <backend> <torch threads>` in `trace` when its process starts training."""

    def __init__(self, trace: str) -> None:
        self.trace = trace

    def on_train_start(self, trainer: Trainer, module: LightningModule) -> None:
        backend = dist.get_backend() if dist.is_initialized() else "none"
        with open(self.trace, "a") as f:
            f.write(f"{trainer.global_rank} {trainer.world_size} {backend} {torch.get_num_threads()}\n")


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], Path]:
    """Overrides that add a `Probe`, importable by rank 1's process too, and its trace file."""
    path = [str(Path(__file__).resolve().parent), str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    trace = tmp_path / "trace.txt"
    return [f"+callbacks.probe._target_={__name__}.Probe", f"+callbacks.probe.trace={trace}"], trace


def test_two_gloo_processes_give_one_processs_validation_metrics(
    tmp_path: Path, probe: tuple[list[str], Path]
) -> None:
    overrides, trace = probe
    alone = completed(tmp_path / "one", *LEARNS)
    both = completed(tmp_path / "two", *LEARNS, "trainer=ddp_cpu", *overrides)
    assert (alone["world_size"], both["world_size"]) == (1, 2)
    assert both["steps"] == alone["steps"] == 2 * 1024 // 32  # the same global batches, one step each
    assert 0.2 < alone["metrics"]["val/exact_match"] < 0.8
    assert both["metrics"].keys() == alone["metrics"].keys()
    for key, value in alone["metrics"].items():
        assert both["metrics"][key] == pytest.approx(value, rel=TOLERANCE), key
    ranks = sorted(line.split() for line in trace.read_text().splitlines())
    assert ranks == [["0", "2", "gloo", "1"], ["1", "2", "gloo", "1"]]  # two processes, one thread each
    assert both["pid"] == os.getpid()  # the record is rank 0's: this process's


def test_sigterm_to_rank_0_stops_both_ranks_and_resume_auto_reaches_an_uninterrupted_runs_metrics(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    # dropout on (the decoder's default): each rank's generators must be restored, not only rank 0's
    ddp = [*TINY_RNN, *TINY, *sizes(train=1000), "trainer.max_epochs=3", "trainer=ddp_cpu"]
    uninterrupted = completed(tmp_path / "uninterrupted", *ddp)
    first = launch(["train", *ddp, f"hydra.run.dir={run}"], tmp_path / "first.out")
    wait_for((run / "checkpoints" / "last.ckpt").exists, what="the first epoch's checkpoint")
    os.kill(first.pid, signal.SIGTERM)  # rank 0 alone: rank 1 must stop at the same batch end
    ended(first, 143)
    stopped = record(run)
    assert stopped["status"] == "interrupted" and stopped["error"] == "interrupted by SIGTERM"
    assert torch.load(stopped["checkpoint"], weights_only=True)["global_step"] == stopped["steps"] > 0
    assert not _ranks_started_by(first.pid)  # rank 1 ended with rank 0

    done = completed(run, *ddp, "resume=auto")
    assert done["resumed_from"].endswith("last.ckpt") and done["world_size"] == 2
    assert done["steps"] == uninterrupted["steps"] == 3 * 63  # 3 epochs of ceil(1000 / 16) global batches
    assert done["metrics"] == uninterrupted["metrics"]  # to the last digit: same batches, same masks


def _ranks_started_by(pid: int) -> list[int]:
    """Live processes whose environment says rank 0 of pid `pid` started them (attnx.train.distributed)."""
    marker = f"{sweep.PARENT}={pid}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


@pytest.mark.gpu
def test_trainer_ddp_runs_on_every_gpu_with_nccl(tmp_path: Path, probe: tuple[list[str], Path]) -> None:
    overrides, trace = probe
    gpus = torch.cuda.device_count()
    done = completed(tmp_path, *TINY_RNN, *TINY, "trainer=ddp", f"trainer.devices={gpus}", *overrides)
    assert done["world_size"] == gpus
    backends = {line.split()[2] for line in trace.read_text().splitlines()}
    assert backends == {"nccl"}
