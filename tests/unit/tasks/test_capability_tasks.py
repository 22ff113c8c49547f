"""MAD's capability tasks (Poli et al. 2024): MAD's defaults, determinism from (seed, split) without global
random state, disjoint splits, targets only at the answers, each answer recoverable by its docstring's rule,
the sliding-window ceiling, and one-line errors for sizes that cannot hold the structure."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from attnx.registry import config_class, load_all, registry
from attnx.tasks.base import SPLITS, Task
from attnx.tasks.recall import InContextRecallTask
from attnx.tasks.synthetic import rows_in
from attnx.vocab import BOS, EOS, PAD, SPECIALS

load_all()
FIRST = len(SPECIALS)
TINY = {"train_size": 60, "val_size": 20, "test_size": 30, "batch_size": 16}
SMALL = {  # each task at a size that builds in milliseconds
    "in_context_recall": {"seq_len": 32},
    "noisy_recall": {"seq_len": 32},
    "fuzzy_recall": {"seq_len": 48},
    "selective_copying": {"seq_len": 24, "num_tokens_to_copy": 4},
    "memorization": {"vocab_size": 32, "seq_len": 16},
    "compression": {"seq_len": 12},
}


def make(name: str, **kwargs: object) -> Task:
    task = registry("task").get(name)(**{**TINY, **SMALL[name], **kwargs})
    task.setup()
    return task


def defaults(name: str) -> dict[str, object]:
    return {f.name: f.default for f in dataclasses.fields(config_class(registry("task").entry(name)))}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("in_context_recall", {"vocab_size": 16, "seq_len": 128, "frac_noise": 0.0, "train_size": 12800}),
        ("noisy_recall", {"vocab_size": 32, "noise_vocab_size": 16, "frac_noise": 0.2, "seq_len": 128}),
        ("fuzzy_recall", {"vocab_size": 16, "k_motif_size": 3, "v_motif_size": 3, "seq_len": 128}),
        ("selective_copying", {"vocab_size": 16, "seq_len": 256, "num_tokens_to_copy": 16}),
        ("memorization", {"vocab_size": 256, "seq_len": 32, "train_size": 256}),
        ("compression", {"vocab_size": 16, "seq_len": 32, "train_size": 12800}),
    ],
)
def test_defaults_are_mads_baselines(name: str, expected: dict[str, object]) -> None:
    got = defaults(name)
    assert {key: got[key] for key in expected} == expected
    assert got["test_size"] == 1280 and got["batch_size"] == 128  # MADConfig's


@pytest.mark.parametrize("name", list(SMALL))
def test_splits_come_from_seed_and_split_alone_and_never_repeat(name: str) -> None:
    torch.manual_seed(0)
    np.random.seed(0)
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()[1].copy()
    task, again, other = make(name), make(name), make(name, seed=1)
    # no global random state is read or advanced
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert np.array_equal(np.random.get_state()[1], numpy_state)
    for split in SPLITS:
        assert torch.equal(task.splits[split].src, again.splits[split].src)
        assert torch.equal(task.splits[split].tgt, again.splits[split].tgt)
        assert not torch.equal(task.splits[split].src, other.splits[split].src)
    for later, earlier in (("val", "train"), ("test", "train"), ("test", "val")):
        assert not rows_in(task.splits[later].src, task.splits[earlier].src).any()


def parse(row: list[int], task: InContextRecallTask) -> tuple[dict[int, int], dict[int, int]]:
    """The docstring's rule, read off a whole sequence: runs of key tokens then value tokens are pairs;
    a pair whose key an earlier pair holds answers each of its value tokens with that pair's. Returns
    {position: the token expected there} and {position: where the nearest earlier pair started}."""
    kind = ["key" if t < task.keys else "value" if t < task.keys + task.values else "other" for t in row]
    runs, start = [], 0
    for i in range(1, len(row) + 1):
        if i == len(row) or kind[i] != kind[start]:
            runs.append((kind[start], start, row[start:i]))
            start = i
    bound: dict[tuple[int, ...], tuple[int, list[int]]] = {}
    expected, support = {}, {}
    for (k, at, key), (v, _, value) in zip(runs, runs[1:]):
        if k != "key" or v != "value":
            continue
        if tuple(key) in bound:
            earlier, known = bound[tuple(key)]
            for offset, token in enumerate(known):
                expected[at + len(key) + offset] = token
                support[at + len(key) + offset] = earlier
            assert value == known  # a key keeps its value within a sequence
        bound[tuple(key)] = (at, value)
    return expected, support


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("in_context_recall", {}),
        ("noisy_recall", {}),
        ("noisy_recall", {"frac_noise": 0.6}),
        ("fuzzy_recall", {}),
    ],
)
def test_every_recall_answer_is_the_value_its_key_held_before(name: str, kwargs: dict[str, object]) -> None:
    task = make(name, **kwargs)
    assert isinstance(task, InContextRecallTask)
    window, reached, answers = 6, 0, 0
    for split in SPLITS:
        data = task.splits[split]
        assert data.src.shape[1] == task.seq_len - 1  # MAD's inputs[:-1]
        for src, tgt in zip(data.src.tolist(), data.tgt.tolist()):
            assert tgt[-1] != PAD  # the probe: its last value token is the last target
            whole = [t - FIRST for t in [*src, tgt[-1]]]
            expected, support = parse(whole, task)
            got = {t + 1: token - FIRST for t, token in enumerate(tgt) if token != PAD}
            assert got == expected
            if split == "test":
                reached += sum(support[p] > p - 1 - window for p in expected)
                answers += len(expected)
    assert task.window_ceiling(window) == pytest.approx(reached / answers)
    test = task.splits["test"]
    assert torch.equal(task.query_mask(test.src), test.tgt != PAD)  # what attnx predict reads off an input


def test_fuzzy_recall_prompts_with_whole_keys_at_test_and_motifs_of_every_size_in_training() -> None:
    task = make("fuzzy_recall")
    assert isinstance(task, InContextRecallTask)
    for split, sizes in (("train", {1, 2, 3}), ("test", {3})):
        runs = set()
        for row in task.splits[split].src.tolist():
            keys = "".join("k" if t - FIRST < task.keys else " " for t in row).split()
            runs |= {len(run) for run in keys}
        assert runs == sizes


def test_window_ceiling_grows_with_the_window_to_one() -> None:
    task = make("in_context_recall")
    assert isinstance(task, InContextRecallTask)
    ceilings = [task.window_ceiling(w) for w in (1, 2, 4, 8, 16, 32)]
    assert ceilings == sorted(ceilings) and ceilings[0] == 0 and ceilings[-1] == 1
    assert 0 < task.window_ceiling(8) < 1


def test_selective_copying_answers_are_the_tokens_before_the_copy_token_in_order() -> None:
    task = make("selective_copying")
    blank, copy = FIRST + 14, FIRST + 15
    for src, tgt in zip(task.splits["test"].src.tolist(), task.splits["test"].tgt.tolist()):
        at = src.index(copy)
        assert at == 24 - 4 - 1 and src[at + 1 :] == [blank] * 4
        assert tgt[: at + 1] == [PAD] * (at + 1)
        assert tgt[at + 1 :] == [t for t in src[:at] if t != blank]
    assert task.query_mask(task.splits["test"].src)[0].nonzero().flatten().tolist() == [20, 21, 22, 23]


def test_memorization_asks_every_split_about_the_same_facts_at_the_insert_tokens() -> None:
    task = make("memorization")
    insert = FIRST + 31
    facts: dict[int, int] = {}
    for split in SPLITS:
        src, tgt = task.splits[split].src, task.splits[split].tgt
        assert (src[:, 1::2] == insert).all() and (tgt[:, ::2] == PAD).all()
        for key, value in zip(src[:, ::2].flatten().tolist(), tgt[:, 1::2].flatten().tolist()):
            assert facts.setdefault(key, value) == value  # one value per key, in every split
        assert not torch.isin(tgt[:, 1::2], src).any()  # values never appear in an input
    assert len(set(facts.values())) == len(facts)  # a one-to-one dictionary
    assert torch.equal(task.query_mask(src), src == insert)


def test_compression_target_is_the_source_itself() -> None:
    task = make("compression")
    assert task.model_type == "seq2seq" and type(task).default_attention == "fixed_c"
    data = task.splits["test"]
    assert (data.src[:, -1] == FIRST + 15).all() and (data.src[:, :-1] < FIRST + 15).all()
    assert (data.tgt[:, 0] == BOS).all() and (data.tgt[:, -1] == EOS).all()
    assert torch.equal(data.tgt[:, 1:-1], data.src)


@pytest.mark.parametrize(
    ("name", "kwargs", "message"),
    [
        ("in_context_recall", {"seq_len": 3}, "task.seq_len=3 is invalid: must be >= 2 * (k_motif_size"),
        ("in_context_recall", {"seq_len": 33}, "task.seq_len=33 is invalid: must be even"),
        ("in_context_recall", {"vocab_size": 1}, "task.vocab_size=1 is invalid: must be >= 2 * max"),
        ("noisy_recall", {"frac_noise": 1.0}, "task.frac_noise=1.0 is invalid: must be in [0, 1)"),
        ("noisy_recall", {"frac_noise": -0.1}, "task.frac_noise=-0.1 is invalid: must be in [0, 1)"),
        ("noisy_recall", {"vocab_size": 17}, "task.vocab_size=17 is invalid: must be >= 2 * max"),
        ("in_context_recall", {"frac_noise": 0.2}, "frac_noise=0.2 is invalid: must be 0 without noise"),
        ("fuzzy_recall", {"k_motif_size": 8}, "vocab_size=16 is invalid: must be >= 2 * max(k_motif"),
        ("fuzzy_recall", {"v_motif_size": 0}, "task.v_motif_size=0 is invalid: must be >= 1"),
        ("fuzzy_recall", {"seq_len": 10}, "task.seq_len=10 is invalid: must be >= 2 * (k_motif_size"),
        ("selective_copying", {"num_tokens_to_copy": 12}, "task.num_tokens_to_copy=12 is invalid: must be <"),
        ("selective_copying", {"vocab_size": 2}, "task.vocab_size=2 is invalid: must be >= 3"),
        ("memorization", {"seq_len": 2, "vocab_size": 5}, "task.seq_len=2 is invalid: must be large enough"),
        ("compression", {"seq_len": 1}, "task.seq_len=1 is invalid: must be >= 2"),
    ],
)
def test_sizes_that_cannot_hold_the_structure_are_one_line_naming_the_key(
    name: str, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError) as error:
        registry("task").get(name)(**{**TINY, **SMALL[name], **kwargs})
    assert message in str(error.value) and "\n" not in str(error.value)
