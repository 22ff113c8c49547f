"""One LightningDataModule for every task: tasks stay Lightning-free, this wraps their loaders."""

from __future__ import annotations

import lightning.pytorch as pl
from torch.utils.data import DataLoader

from attnx.tasks.base import Task


class TaskDataModule(pl.LightningDataModule):
    """The task's splits. Evaluation batches are always sorted by length (`IndexBatchSampler`): less
    padding to decode, and metrics do not depend on the order. Training batches are of similar
    lengths only with `bucketing`; random ones by default, as mixed lengths train faster on the
    algorithmic tasks (benchmarks/README.md §9).

    Under DDP each process loads its share of every batch (`IndexBatchSampler`'s `num_replicas` and
    `rank`, from the Trainer): attnx's Trainer sets `use_distributed_sampler=False`, since Lightning's
    `DistributedSampler` would shard the batches themselves, repeating some to even out the ranks."""

    def __init__(self, task: Task, bucketing: bool = False) -> None:
        super().__init__()
        self.task = task
        self.bucketing = bucketing

    def setup(self, stage: str | None = None) -> None:
        self.task.setup()

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True, bucketing=self.bucketing)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", bucketing=True)

    def test_dataloader(self) -> DataLoader | list[DataLoader]:
        """The test split's loader; with test slices, a list: test's, then each slice's (`test@2x`, ...),
        the order of the module's `test_splits`."""
        loaders = [self._loader(split, bucketing=True) for split in self.task.split_names()[2:]]
        return loaders if len(loaders) > 1 else loaders[0]

    def _loader(self, split: str, shuffle: bool = False, bucketing: bool = False) -> DataLoader:
        trainer = self.trainer  # None for a bare data module: one process
        ranks = {"num_replicas": trainer.world_size, "rank": trainer.global_rank} if trainer else {}
        return self.task.dataloader(split, shuffle=shuffle, bucketing=bucketing, **ranks)
