"""One LightningDataModule for every task: tasks stay Lightning-free, this wraps their loaders."""

from __future__ import annotations

import lightning.pytorch as pl
from torch.utils.data import DataLoader

from attnx.tasks.base import Task


class TaskDataModule(pl.LightningDataModule):
    """The task's splits. Evaluation batches are always sorted by length (`IndexBatchSampler`): less
    padding to decode, and metrics do not depend on the order. Training batches are of similar
    lengths only with `bucketing`; random ones by default, as mixed lengths train faster on the
    algorithmic tasks (benchmarks/README.md §9)."""

    def __init__(self, task: Task, bucketing: bool = False) -> None:
        super().__init__()
        self.task = task
        self.bucketing = bucketing

    def setup(self, stage: str | None = None) -> None:
        self.task.setup()

    def train_dataloader(self) -> DataLoader:
        return self.task.dataloader("train", shuffle=True, bucketing=self.bucketing)

    def val_dataloader(self) -> DataLoader:
        return self.task.dataloader("val", bucketing=True)

    def test_dataloader(self) -> DataLoader:
        return self.task.dataloader("test", bucketing=True)
