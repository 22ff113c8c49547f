"""`task.test_slices`: test splits beyond the training length, each in its own band, stream and metrics."""

from __future__ import annotations

import pytest
import torch

from attnx.registry import registry
from attnx.tasks.base import Task
from attnx.tasks.synthetic import rows_in

TINY = {"train_size": 60, "val_size": 20, "test_size": 20, "batch_size": 16}
MQAR = {**TINY, "vocab_size": 16, "seq_len": 16, "num_kv_pairs": 2}


def make(name: str, **kwargs) -> Task:
    task = registry("task").get(name)(**{**TINY, **kwargs})
    task.setup()
    return task


@pytest.mark.parametrize("name", ["reverse", "copy", "sort"])
def test_a_slice_draws_lengths_in_its_band_past_training(name: str) -> None:
    task = make(name, min_len=6, max_len=12, test_slices=[4, 2])
    assert task.split_names() == ["train", "val", "test", "test@2x", "test@4x"]
    assert int(task.splits["test"].src_len.max()) <= 12  # the headline test stays in distribution
    for k, (low, high) in ((2, (13, 24)), (4, (25, 48))):
        lengths = task.splits[f"test@{k}x"].src_len
        assert len(lengths) == 20 and low <= int(lengths.min()) and int(lengths.max()) <= high


def test_slices_are_unseen_elsewhere_deterministic_and_on_their_own_streams() -> None:
    # 2x draws lengths 3-4 of 2 symbols (24 strings), which test's lengths 1-4 share
    small = {"vocab_size": 2, "min_len": 1, "max_len": 2, "test_min_len": 1, "test_max_len": 4}
    task = make("copy", **small, train_size=6, val_size=1, test_size=8, test_slices=[2])
    for split in ("train", "val", "test"):
        assert not rows_in(task.splits["test@2x"].src, task.splits[split].src).any()
    both = make("reverse", test_slices=[2, 3])
    again = make("reverse", test_slices=[3, 2])
    alone = make("reverse")
    for split in both.split_names():
        assert torch.equal(both.splits[split].src, again.splits[split].src)
    for split in alone.split_names():  # a slice draws from its own stream: the other splits do not move
        assert torch.equal(both.splits[split].src, alone.splits[split].src)
    assert torch.equal(make("reverse", test_slices=[2]).splits["test@2x"].src, both.splits["test@2x"].src)


def test_addition_slices_count_digits() -> None:
    task = make("addition", min_digits=1, max_digits=3, test_slices=[2])
    src, src_len = task.splits["test@2x"].src, task.splits["test@2x"].src_len
    operands = [task.src_vocab.decode(row[:n].tolist()) for row, n in zip(src, src_len.tolist())]
    digits = ["".join(t).split("+") for t in operands]
    assert all(max(len(a), len(b)) in range(4, 7) for a, b in digits)


def test_mqar_slice_has_longer_sequences_and_more_pairs() -> None:
    task = make("mqar", **MQAR, test_slices=[2, 3])
    for k in (2, 3):
        data = task.splits[f"test@{k}x"]
        assert data.src.shape == (20, 16 * k)
        targets = (data.tgt != 0).sum(1)
        assert torch.equal(targets, torch.full((20,), 2 * k))  # one query per key: k · num_kv_pairs
        queries = task.query_mask(data.src)
        assert (queries & (data.tgt != 0)).sum(1).eq(2 * k).all()  # every query found, at k · pairs keys
    batch = next(iter(task.dataloader("test@3x")))
    assert batch.src.shape[1] == 48


def test_mqar_query_mask_keeps_test_pairs_where_lengths_coincide() -> None:
    # test@2x and the harder test share 32 tokens; test's 3 pairs win, as before slices existed
    task = make("mqar", **MQAR, test_seq_len=32, test_num_kv_pairs=3, test_slices=[2])
    data = task.splits["test"]
    assert (task.query_mask(data.src) & (data.tgt != 0)).sum(1).eq(3).all()


def test_an_unknown_split_lists_the_slices() -> None:
    task = make("reverse", test_slices=[2])
    with pytest.raises(ValueError, match="expected one of train, val, test, test@2x"):
        task.dataloader("test@3x")


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        (
            "reverse",
            {"test_slices": [1]},
            r"task\.test_slices=\[1\] is invalid: must be distinct integers >= 2",
        ),
        ("reverse", {"test_slices": [0, 2]}, r"task\.test_slices=\[0, 2\] is invalid"),
        ("copy", {"test_slices": [2, 2]}, r"task\.test_slices=\[2, 2\] is invalid: must be distinct"),
        (
            "mqar",
            {**MQAR, "test_slices": [4]},
            r"task\.test_slices=\[4\] is invalid: must be multiples of at most 3",
        ),
        (
            "addition",
            {"max_digits": 5, "test_slices": [4]},
            r"task\.test_slices=\[4\] is invalid: .* at most 18",
        ),
    ],
)
def test_bad_slices_are_one_line_naming_the_key(name: str, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as error:
        registry("task").get(name)(**kwargs)
    assert "\n" not in str(error.value)


def test_tasks_without_slices_have_the_three_splits() -> None:
    assert make("listops", min_len=3, max_len=8).split_names() == ["train", "val", "test"]
