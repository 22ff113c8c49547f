"""Slices of the tasks built from real data (downloaded corpora and packaged lexicons)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnx.registry import registry
from attnx.tasks.base import Task

SLICE = {"train_size": 200, "val_size": 50, "test_size": 50, "batch_size": 16}


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("attnx_data")


def make(name: str, **kwargs) -> Task:
    task = registry("task").get(name)(**{**SLICE, **kwargs})
    task.setup()
    return task


def texts(task: Task, split: str) -> set[tuple[str, ...]]:
    return {tuple(task.src_vocab.decode(row)) for row in task.splits[split].src.tolist()}
