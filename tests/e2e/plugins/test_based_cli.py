"""Based (attnx.contrib.based) trains an lm through the real CLI; a bad feature_dim is one line, exit 2."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from helpers.tiny import TINY_BUDGET, TINY_LM, completed, train


def test_trains_an_lm_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = completed(tmp_path / "run", *TINY_LM, "attention=based", "attention.feature_dim=4", *TINY_BUDGET)
    assert record["choices"]["attention"] == "based" and math.isfinite(record["metrics"]["test/loss"])
    assert train(tmp_path / "bad", *TINY_LM, "attention=based", "attention.feature_dim=0", *TINY_BUDGET) == 2
    assert "feature_dim" in capsys.readouterr().err.strip().splitlines()[-1]
