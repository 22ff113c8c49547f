"""A test process outside any cluster job (`no_cluster`), even when the tests run inside one."""

from __future__ import annotations

import os

import pytest

from attnx.train.distributed import NODE_VARIABLES

# what Lightning's cluster environments detect (torchelastic, SLURM, LSF) and its own reads for nodes
CLUSTER = ("TORCHELASTIC_RUN_ID", "LSB_JOBID", "LSB_HOSTS", "LSB_MCPU_HOSTS", *NODE_VARIABLES)


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process outside any cluster job, even when the tests run inside one."""
    for name in [*CLUSTER, *(n for n in os.environ if n.startswith("SLURM_"))]:
        monkeypatch.delenv(name, raising=False)
