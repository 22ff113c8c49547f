"""One LightningDataModule for every task: tasks stay Lightning-free, this wraps their loaders."""

from __future__ import annotations

import lightning.pytorch as pl
from torch.utils.data import DataLoader

from attnx.tasks.base import Task


class TaskDataModule(pl.LightningDataModule):
    def __init__(self, task: Task) -> None:
        super().__init__()
        self.task = task

    def setup(self, stage: str | None = None) -> None:
        self.task.setup()

    def train_dataloader(self) -> DataLoader:
        return self.task.dataloader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self.task.dataloader("val")

    def test_dataloader(self) -> DataLoader:
        return self.task.dataloader("test")
