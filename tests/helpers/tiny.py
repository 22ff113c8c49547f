"""Tiny runs of the real `attnx train` CLI, shared by the end-to-end tests.

Overrides compose: later ones win, so a test extends a list (`*TINY_SELF_ATTN, "encoder.num_layers=2"`)
rather than writing its own variant. The CLI runs in-process, so Lightning is imported once.
"""

from __future__ import annotations

import json
from pathlib import Path

from attnx.cli import main as cli

TINY_RNN = ["encoder=rnn", "encoder.embed_dim=8", "encoder.hidden_dim=16"]
TINY_SELF_ATTN = [
    "encoder=self_attn",
    "encoder.d_model=16",
    "encoder.attention.num_heads=2",
    "encoder.num_layers=1",
    "encoder.ff_dim=16",
]
TINY_MODEL = ["decoder.embed_dim=8", "decoder.hidden_dim=16"]
TINY_TRANSFORMER = [
    "decoder=transformer",
    "decoder.d_model=16",
    "decoder.attention.num_heads=2",
    "decoder.num_layers=1",
    "decoder.ff_dim=16",
]
# the lm kind on MQAR sequences of 16 tokens with 2 key-value pairs
TINY_LM = [
    "task=mqar",
    "task.vocab_size=16",
    "task.seq_len=16",
    "task.num_kv_pairs=2",
    "lm.d_model=16",
    "lm.num_layers=1",
    "lm.ff_dim=16",
]
ONE_EPOCH = ["trainer.max_epochs=1", "optim.scheduler.warmup_steps=0"]


def sizes(train: int | None = 48, val: int | None = 16, test: int | None = 16, batch: int = 16) -> list[str]:
    """`task.*_size` overrides; None leaves a size to the task (file-backed tasks read whole files)."""
    chosen = {"train_size": train, "val_size": val, "test_size": test, "batch_size": batch}
    return [f"task.{key}={value}" for key, value in chosen.items() if value is not None]


# Heatmaps are drawn only where a test looks at them (TINY_DRAWN, test_tracking.py): drawing them at a
# tiny run's test end costs more than the run.
NO_HEATMAPS = ["callbacks.attention_heatmaps=null"]
TINY_BUDGET = [*ONE_EPOCH, *sizes(), *NO_HEATMAPS]  # without the rnn decoder's sizes, for decoder=transformer
TINY = [*TINY_MODEL, *TINY_BUDGET]
TINY_DRAWN = [*TINY_MODEL, *ONE_EPOCH, *sizes()]


def train(tmp: Path, *overrides: str, sweep: bool = False) -> int:
    """`attnx train [-m] <overrides>` writing into `tmp`; the CLI's exit code."""
    where = f"hydra.sweep.dir={tmp}" if sweep else f"hydra.run.dir={tmp}"
    return cli(["train", *(["-m"] if sweep else []), *overrides, where])


def results(root: Path) -> list[dict]:
    """Every results.json under `root`, in path order (a sweep's jobs by number)."""
    return [json.loads(p.read_text()) for p in sorted(root.rglob("results.json"))]


def completed(tmp: Path, *overrides: str) -> dict:
    """The record of a single run that must complete."""
    train(tmp, *overrides)
    (record,) = results(tmp)
    assert record["status"] == "completed", record.get("error")
    return record


# Two encoder layers and multi-head attention: every module with a fused path; 32 examples in batches of 8.
FUSED = [
    *TINY_SELF_ATTN,
    "encoder.num_layers=2",
    "attention=multi_head",
    "attention.num_heads=2",
    *TINY_MODEL,
    "classifier.dropout=0.0",
    *sizes(train=32, val=8, test=8, batch=8),
    *NO_HEATMAPS,
]
