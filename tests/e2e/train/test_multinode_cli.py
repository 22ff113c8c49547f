"""A DDP run on several nodes that no cluster environment backs is refused before training, rather than
waiting forever for nodes that nobody starts; one that an environment backs is left to Lightning."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from test_faults import launch

from helpers.tiny import TINY, TINY_RNN


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
