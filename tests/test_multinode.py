"""A DDP run on several nodes that no cluster environment backs is refused before training, rather than
waiting forever for nodes that nobody starts; one that an environment backs is left to Lightning."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from lightning.pytorch import Trainer
from test_faults import launch
from tiny import TINY, TINY_RNN

from attnx.config.compose import ConfigError
from attnx.train.distributed import NODE_VARIABLES, check_nodes

# what Lightning's cluster environments detect (torchelastic, SLURM, LSF) and its own reads for nodes
CLUSTER = ("TORCHELASTIC_RUN_ID", "LSB_JOBID", "LSB_HOSTS", "LSB_MCPU_HOSTS", *NODE_VARIABLES)


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process outside any cluster job, even when the tests run inside one."""
    for name in [*CLUSTER, *(n for n in os.environ if n.startswith("SLURM_"))]:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.e2e
@pytest.mark.usefixtures("no_cluster")
def test_two_nodes_on_one_machine_are_refused_before_training(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = ["train", "trainer=ddp_cpu", "trainer.num_nodes=2", *TINY_RNN, *TINY, f"hydra.run.dir={run}"]
    child = launch(args, tmp_path / "output.txt")
    child.join(120)  # before the fix: rank 0 waits for the second node forever
    if child.is_alive():
        os.kill(child.pid, signal.SIGKILL)  # its local rank ends with it (attnx.track.sweep.watch_parent)
        child.join()
    said = (tmp_path / "output.txt").read_text().strip().splitlines()
    assert child.exitcode == 2, said[-20:]
    assert said[-1].startswith("attnx train: trainer.num_nodes=2: nothing starts the other nodes"), said
    assert "MASTER_ADDR and NODE_RANK not set" in said[-1]
    assert not (run / "checkpoints").exists() or not list((run / "checkpoints").iterdir())


@pytest.mark.usefixtures("no_cluster")
def test_nodes_that_the_environment_names_are_lightnings_to_join(monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = Trainer(accelerator="cpu", strategy="ddp", devices=1, num_nodes=2, logger=False)
    with pytest.raises(ConfigError, match="trainer.num_nodes=2"):
        check_nodes(trainer)
    # Lightning's general-purpose cluster: the same command on each node, with these set
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")
    monkeypatch.setenv("NODE_RANK", "1")
    check_nodes(trainer)
    check_nodes(Trainer(accelerator="cpu", devices=1, logger=False))  # one node: nothing to start
