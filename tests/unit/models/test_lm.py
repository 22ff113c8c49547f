"""The `lm` model kind and the MQAR task (Zoology's multi-query associative recall)."""

from __future__ import annotations

import pytest
import torch

from attnx.tasks.mqar import MQARTask
from attnx.vocab import PAD, SPECIALS

FIRST = len(SPECIALS)  # token t has id FIRST + t


def test_mqar_sequences_hold_pairs_then_one_query_per_key_whose_target_is_its_value() -> None:
    task = MQARTask(vocab_size=64, seq_len=64, num_kv_pairs=4, train_size=200, val_size=20, test_size=20)
    task.setup()
    data = task.splits["train"]
    assert data.src.shape == data.tgt.shape == (200, 64)
    tokens, targets = data.src - FIRST, data.tgt
    for row, target in zip(tokens.tolist(), targets.tolist()):
        keys, values = row[0:8:2], row[1:8:2]
        assert len(set(keys)) == 4 and all(1 <= k < 32 for k in keys)  # distinct, lower half (0 is filler)
        assert len(set(values)) == 4 and all(32 <= v < 64 for v in values)  # distinct, upper half
        queried = {t: row[t] for t, y in enumerate(target) if y != PAD}
        assert sorted(queried.values()) == sorted(keys)  # every key queried once, nothing else has a target
        assert all(t >= 8 and (t - 8) % 2 == 0 for t in queried)  # after the pairs, at even offsets
        for t, key in queried.items():
            assert target[t] - FIRST == values[keys.index(key)]


def test_mqar_splits_are_deterministic_disjoint_and_the_test_split_can_be_harder() -> None:
    def splits(seed: int) -> dict:
        task = MQARTask(seed=seed, test_seq_len=128, test_num_kv_pairs=8, train_size=300, test_size=50)
        task.setup()
        return task.splits

    a, b, other = splits(0), splits(0), splits(1)
    assert all(torch.equal(a[s].src, b[s].src) and torch.equal(a[s].tgt, b[s].tgt) for s in a)
    assert not torch.equal(a["train"].src, other["train"].src)
    train_rows = {tuple(r) for r in a["train"].src.tolist()}
    assert not train_rows & {tuple(r) for r in a["val"].src.tolist()}
    assert a["val"].src.shape[1] == 64 and a["test"].src.shape[1] == 128
    assert ((a["test"].tgt != PAD).sum(1) == 8).all() and ((a["val"].tgt != PAD).sum(1) == 4).all()


def test_alpha_sets_how_far_queries_sit_from_the_pairs() -> None:
    def near(alpha: float) -> float:
        """The share of queries in the first quarter of the query region."""
        task = MQARTask(alpha=alpha, seq_len=128, num_kv_pairs=4, train_size=2000, val_size=1, test_size=1)
        task.setup()
        at = (task.splits["train"].tgt != PAD).nonzero()[:, 1] - 8
        return float((at < 30).float().mean())

    assert near(0.01) > 0.5  # Zoology's power law: mostly short distances, some long
    assert near(1.0) == pytest.approx(0.25, abs=0.05)  # α = 1: uniform gaps
