"""A DDP run on several nodes that no cluster environment backs is refused before training, rather than
waiting forever for nodes that nobody starts; one that an environment backs is left to Lightning."""


from __future__ import annotations

import os

import pytest
from lightning.pytorch import Trainer

from attnx.config.compose import ConfigError
from attnx.train.distributed import NODE_VARIABLES, check_nodes

# what Lightning's cluster environments detect (torchelastic, SLURM, LSF) and its own reads for nodes
CLUSTER = ("TORCHELASTIC_RUN_ID", "LSB_JOBID", "LSB_HOSTS", "LSB_MCPU_HOSTS", *NODE_VARIABLES)


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process outside any cluster job, even when the tests run inside one."""
    for name in [*CLUSTER, *(n for n in os.environ if n.startswith("SLURM_"))]:
        monkeypatch.delenv(name, raising=False)


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
