"""A checkpoint saved with a hyperparameter that its mechanism no longer takes (renamed since) is not
rebuilt silently with today's default: `attnx predict` refuses it, naming the mechanism, the argument
and its saved value, unless asked with `strict=false`, which then says in its output what it dropped."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnx.cli import main as cli

from helpers.tiny import TINY, TINY_RNN, train


def test_a_checkpoint_whose_argument_was_renamed_is_refused_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        train(tmp_path, "task=reverse", "attention=local_window", "attention.window=1", *TINY_RNN, *TINY) == 0
    )
    # as if trained when the mechanism's `window` was called `span`: today it would get window=3
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    attention = checkpoint["attnx_spec"]["attention"]
    attention["span"] = attention.pop("window")
    old = tmp_path / "old.ckpt"
    torch.save(checkpoint, old)
    capsys.readouterr()

    assert cli(["predict", f"ckpt={old}", "input=1 2 3"]) == 2
    said = capsys.readouterr()
    assert said.out == ""
    assert said.err.strip() == (
        f"attnx predict: ckpt={old}: attention 'local_window' no longer takes span=1, saved with the "
        "model; rebuilt without it, the model would differ from the one trained (strict=false runs it anyway)"
    )

    assert cli(["predict", f"ckpt={old}", "input=1 2 3", "strict=false"]) == 0
    header, prediction, *maps = capsys.readouterr().out.splitlines()
    assert (
        header
        == "strict=false: rebuilt without saved attention 'local_window' span=1 (today's defaults stand in)"
    )
    assert prediction and maps[0].startswith("local_window cross-attention")
