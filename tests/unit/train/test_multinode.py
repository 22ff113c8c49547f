"""A DDP run on several nodes that no cluster environment backs is refused before training, rather than
waiting forever for nodes that nobody starts; one that an environment backs is left to Lightning."""

from __future__ import annotations

import pytest
from lightning.pytorch import Trainer

from attnx.config.compose import ConfigError
from attnx.train.distributed import check_nodes


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
