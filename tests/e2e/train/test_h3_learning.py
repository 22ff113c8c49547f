"""H3's synthetic tasks are learnable: softmax attention (the tasks' default, multi_head) solves each at a
small size in seconds on one core, and `attnx predict` answers a raw induction-head prompt.

Margins: induction head (vocab 20: 18 ordinary tokens, prompts of 16) reaches test accuracy >= 0.9
(chance 1/18 = 0.06); associative recall at H3's vocab_size 10 (4 keys, 4 values, 8 pairs) >= 0.9,
where guessing a value is right 1/4 of the time and answering the prompt's most frequent value, which
needs no recall, 0.51. Each test takes 4-8 s on one core.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attnx.cli import main as cli
from attnx.tasks.induction import InductionHeadTask

from helpers.tiny import NO_HEATMAPS, completed, sizes

pytestmark = pytest.mark.slow

SMALL = ["lm.d_model=32", *sizes(train=2000, val=200, test=200, batch=32), *NO_HEATMAPS]


def test_softmax_attention_learns_the_induction_head_and_predict_answers_it(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    record = completed(tmp_path, "task=induction_head", "task.seq_len=16", "trainer.max_epochs=5", *SMALL)
    assert record["choices"]["attention"] == "multi_head"
    assert record["metrics"]["test/acc"] >= 0.9

    fresh = InductionHeadTask(seq_len=16, seed=7, train_size=5, val_size=1, test_size=1)
    fresh.setup()
    right = 0
    for src, tgt in zip(fresh.splits["train"].src.tolist(), fresh.splits["train"].tgt[:, -1].tolist()):
        capsys.readouterr()
        text = " ".join(fresh.src_vocab.itos[i] for i in src)
        assert cli(["predict", f"ckpt={record['checkpoint']}", f"input={text}", "top_k=1"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0] == "position  query -> predicted"
        position, query, _, predicted = out[1].split()  # the one query: the last token, `=>`
        assert (int(position), query) == (16, "=>") and "->" not in out[2]
        right += predicted == fresh.src_vocab.itos[tgt]
    assert right >= 4


def test_softmax_attention_learns_associative_recall(tmp_path: Path) -> None:
    overrides = ["task.vocab_size=10", "task.seq_len=16", "trainer.max_epochs=10", *SMALL]
    record = completed(tmp_path, "task=associative_recall", *overrides)
    assert record["choices"]["attention"] == "multi_head"
    assert record["metrics"]["test/acc"] >= 0.9
