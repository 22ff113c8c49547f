"""Shared test setup: one torch thread (small models run far faster that way on 2 shared cores)."""

import os

import pytest
import torch

torch.set_num_threads(1)
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
