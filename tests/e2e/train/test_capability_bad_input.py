"""Bad sizes for MAD's capability tasks through the real CLI: one stderr line naming the key and its limit,
exit code 2, before any data is drawn or any model built."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnx.cli import main as cli

CASES = [
    ("task=in_context_recall task.seq_len=7", "task.seq_len=7 is invalid: must be even"),
    ("task=noisy_recall task.frac_noise=1.0", "task.frac_noise=1.0 is invalid: must be in [0, 1)"),
    (
        "task=fuzzy_recall task.k_motif_size=9",
        "task.vocab_size=16 is invalid: must be >= 2 * max(k_motif_size",
    ),
    (
        "task=selective_copying task.num_tokens_to_copy=200",
        "task.num_tokens_to_copy=200 is invalid: must be <",
    ),
    ("task=memorization task.vocab_size=2", "task.vocab_size=2 is invalid: must be >= 3"),
    ("task=compression task.seq_len=1", "task.seq_len=1 is invalid: must be >= 2"),
]


@pytest.mark.parametrize(("line", "expected"), CASES)
def test_bad_size_is_one_line_naming_the_key_and_exit_2(
    line: str, expected: str, tmp_path: Path, capfd: pytest.CaptureFixture
) -> None:
    capfd.readouterr()
    code = cli(["train", *line.split(), f"hydra.run.dir={tmp_path}"])
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert expected in lines[0]
    assert not list(tmp_path.rglob("*.ckpt"))  # nothing trained
