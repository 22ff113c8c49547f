"""A checkpoint written by an earlier attnx (tests/data/checkpoints/, from 7bc1631) still loads in
`attnx predict` and resumes training: the model spec a checkpoint stores is upgraded in one place."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from attnx.cli import main as cli

from helpers.paths import TESTS

DATA = TESTS / "data" / "checkpoints"
SIZES = ["task.train_size=48", "task.val_size=16", "task.test_size=16", "task.batch_size=16"]
# each checkpoint's training overrides (tests/data/checkpoints/README.md), an input, what predict prints,
# and the epochs it had trained. The overrides are written out, not taken from helpers/tiny.py: they are
# what the checkpoints were written with, and stay so when the tiny configs change.
CASES = {
    "seq2seq": (
        [
            "task=reverse",
            "attention=additive",
            "encoder=rnn",
            "encoder.embed_dim=8",
            "encoder.hidden_dim=16",
            "decoder.embed_dim=8",
            "decoder.hidden_dim=16",
        ],
        "3 1 4",
        "additive cross-attention",
        2,
    ),
    "lm": (
        [
            "task=mqar",
            "task.vocab_size=16",
            "task.seq_len=16",
            "task.num_kv_pairs=2",
            "lm.d_model=16",
            "lm.num_layers=1",
            "lm.ff_dim=16",
        ],
        "4 1 2 3 4",
        "multi_head causal self-attention",
        1,
    ),
    "classification": (
        [
            "task=sentiment_movies",
            "attention=dot",
            "encoder=rnn",
            "encoder.embed_dim=8",
            "encoder.hidden_dim=16",
        ],
        "a great film",
        "dot pooling",
        1,
    ),
}


def copy(name: str, folder: Path) -> Path:
    """The checkpoint and its checksum, copied: the tests never write next to the committed files."""
    for suffix in ("", ".sha256"):
        shutil.copy(DATA / f"{name}.ckpt{suffix}", folder / f"{name}.ckpt{suffix}")
    return folder / f"{name}.ckpt"


@pytest.mark.parametrize("name", CASES)
def test_an_old_checkpoint_predicts(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, text, maps, _ = CASES[name]
    assert cli(["predict", f"ckpt={copy(name, tmp_path)}", f"input={text}"]) == 0
    out = capsys.readouterr().out
    assert maps in out, out


@pytest.mark.parametrize("name", CASES)
def test_an_old_checkpoint_resumes_training(name: str, tmp_path: Path) -> None:
    overrides, _, _, trained = CASES[name]
    checkpoint = copy(name, tmp_path)
    run = tmp_path / "run"
    assert (
        cli(
            [
                "train",
                *overrides,
                *SIZES,
                "callbacks.attention_heatmaps=null",
                "logger=csv",
                "trainer.max_epochs=3",
                f"ckpt_path={checkpoint}",
                f"hydra.run.dir={run}",
            ]
        )
        == 0
    )
    record = json.loads((run / "results.json").read_text())
    assert record["status"] == "completed"
    assert record["resumed_from"] == str(checkpoint)
    # 48 examples in batches of 16: 3 steps an epoch, 9 in all
    assert record["epochs"] == 3 and record["steps"] == 9, record
    # it went on from where the old run stopped: the first epoch it logged is the first one not yet trained
    logged = [line.split(",")[0] for line in (run / "csv" / "metrics.csv").read_text().splitlines()[1:]]
    assert min(int(epoch) for epoch in logged) == trained, logged
