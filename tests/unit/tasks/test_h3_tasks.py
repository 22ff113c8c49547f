"""H3's synthetic tasks (induction head, associative recall): the answer follows from the prompt by the
stated rule, only the last position has a target, splits are deterministic, disjoint and drawn from the
task's own generators, and bad sizes fail before any data is made."""

from __future__ import annotations

import pytest
import torch

from attnx.tasks.induction import COPY_PREFIX, AssociativeRecallTask, ICLSynthetic, InductionHeadTask
from attnx.vocab import PAD, SPECIALS

FIRST = len(SPECIALS)  # ordinary token t has id FIRST + t
SMALL = {"train_size": 200, "val_size": 50, "test_size": 50}


def built(cls: type[ICLSynthetic], **kwargs) -> ICLSynthetic:
    task = cls(**{**SMALL, **kwargs})
    task.setup()
    return task


def answers(task: ICLSynthetic, split: str) -> list[int]:
    """Each sequence's target at its last position, as a symbol index, after checking it is the only one."""
    tgt = task.splits[split].tgt
    assert (tgt[:, :-1] == PAD).all() and (tgt[:, -1] != PAD).all()
    return (tgt[:, -1] - FIRST).tolist()


@pytest.mark.parametrize(("cls", "width"), [(InductionHeadTask, 31), (AssociativeRecallTask, 42)])
def test_h3_defaults_give_its_sequence_lengths_and_sizes(cls: type[ICLSynthetic], width: int) -> None:
    task = cls()  # H3: vocab_size 20 (18 ordinary tokens, `=>`, `.`), 5000 train and 500 test examples
    assert (task.symbols, task.sizes, task.batch_size) == (18, {"train": 5000, "val": 500, "test": 500}, 32)
    assert len(task.src_vocab) == len(SPECIALS) + 18 + 1  # the no-op `.` is never written
    assert task.src_vocab.itos[-1] == COPY_PREFIX
    part = cls(train_size=3, val_size=1, test_size=1)
    part.setup()
    assert part.splits["train"].src.shape == (3, width)  # the prompt, `=>` (and the key): H3's model input


def test_induction_head_answer_is_the_token_after_the_earlier_copy_prefix() -> None:
    task = built(InductionHeadTask, seq_len=12)
    prefix = task.symbols
    rows = (task.splits["train"].src - FIRST).tolist()
    triggers = []
    for row, answer in zip(rows, answers(task, "train")):
        assert row[-1] == prefix and len(row) == 13
        (p,) = [t for t, s in enumerate(row[:-1]) if s == prefix]  # one trigger in the prompt
        assert p <= 12 - 3 and answer == row[p + 1] and 0 <= answer < prefix
        triggers.append(p)
    assert set(triggers) == set(range(10))  # every allowed trigger position occurs


def test_associative_recall_answer_is_the_value_the_queried_key_had() -> None:
    task = built(AssociativeRecallTask, seq_len=16, vocab_size=12)  # keys 0-4, values 5-9
    rows = (task.splits["train"].src - FIRST).tolist()
    for row, answer in zip(rows, answers(task, "train")):
        assert len(row) == 18 and row[-2] == task.symbols
        keys, values = row[0:16:2], row[1:16:2]
        assert all(0 <= k < 5 for k in keys) and all(5 <= v < 10 for v in values)
        value_of = dict(zip(keys, values))
        assert all(value_of[k] == v for k, v in zip(keys, values))  # a key keeps its value in a sequence
        assert value_of[row[-1]] == answer  # the query is a key of the prompt


def test_splits_are_deterministic_from_the_seed_and_leave_global_random_state_alone() -> None:
    for cls in (InductionHeadTask, AssociativeRecallTask):
        state = torch.get_rng_state()
        a, b, other = built(cls), built(cls), built(cls, seed=1)
        assert torch.equal(torch.get_rng_state(), state)
        for split in a.splits:
            assert torch.equal(a.splits[split].src, b.splits[split].src)
            assert torch.equal(a.splits[split].tgt, b.splits[split].tgt)
        assert not torch.equal(a.splits["train"].src, other.splits["train"].src)


def test_splits_share_no_sequence_even_when_the_space_is_small() -> None:
    # 2 ordinary tokens and a prompt of 4: 2 trigger positions x 2^3 other tokens = 16 sequences
    task = built(InductionHeadTask, vocab_size=4, seq_len=4, train_size=8, val_size=4, test_size=4)
    seen = [{tuple(r) for r in task.splits[s].src.tolist()} for s in ("train", "val", "test")]
    assert not (seen[0] & seen[1] or seen[0] & seen[2] or seen[1] & seen[2])
    with pytest.raises(ValueError, match="task.val_size=50 is invalid: only 0 sequences unseen"):
        built(InductionHeadTask, vocab_size=4, seq_len=4)  # 200 training sequences hold all 16


def test_test_seq_len_lengthens_test_and_val_like_test_follows_it() -> None:
    task = built(AssociativeRecallTask, seq_len=8, test_seq_len=20, val_like_test=True)
    assert [task.splits[s].src.shape[1] for s in ("train", "val", "test")] == [10, 22, 22]
    assert built(InductionHeadTask, seq_len=8, test_seq_len=20).splits["val"].src.shape[1] == 9


def test_query_mask_marks_each_raw_sequences_last_token() -> None:
    task = InductionHeadTask()
    src = torch.tensor([[5, 6, 7, 8], [5, 6, PAD, PAD]])
    assert task.query_mask(src).tolist() == [[False, False, False, True], [False, True, False, False]]


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (InductionHeadTask, {"vocab_size": 3}, "task.vocab_size=3 is invalid: must be >= 4"),
        (InductionHeadTask, {"seq_len": 2}, "task.seq_len=2 is invalid: must be >= 3"),
        (InductionHeadTask, {"test_seq_len": 1}, "task.test_seq_len=1 is invalid: must be >= 3"),
        (AssociativeRecallTask, {"seq_len": 7}, "task.seq_len=7 is invalid: must be an even number >= 2"),
        (AssociativeRecallTask, {"test_seq_len": 0}, "task.test_seq_len=0 is invalid"),
        (AssociativeRecallTask, {"train_size": 0}, "task.train_size=0 is invalid: must be >= 1"),
    ],
)
def test_bad_values_fail_in_the_constructor(cls: type[ICLSynthetic], kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        cls(**kwargs)
