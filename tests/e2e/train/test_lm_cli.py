"""The `lm` model kind and the MQAR task (Zoology's multi-query associative recall)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnx.cli import main as cli
from attnx.tasks.mqar import MQARTask
from attnx.vocab import PAD

from helpers.tiny import NO_HEATMAPS, ONE_EPOCH, TINY_BUDGET, TINY_LM, results, sizes, train


def test_every_causal_mechanism_trains_an_lm_with_heatmaps_of_each_layer(tmp_path: Path) -> None:
    mechanisms = ["additive", "dot", "multi_head"]
    train(tmp_path, *TINY_LM, f"attention={','.join(mechanisms)}", *ONE_EPOCH, *sizes(), sweep=True)
    records = results(tmp_path)
    assert sorted(r["choices"]["attention"] for r in records) == mechanisms
    for r in records:
        assert r["status"] == "completed", r.get("error")
        assert r["model_type"] == "lm" and r["choices"]["encoder"] is None and r["choices"]["decoder"] is None
        assert {"test/acc", "test/exact_match", "val/acc", "test/loss"} <= set(r["metrics"])
        drawn = sorted(p.name for p in (Path(r["output_dir"]) / "attention_maps" / "test").iterdir())
        assert drawn and all(name.startswith("self_layer1") for name in drawn)


def test_default_mechanism_solves_mqar_and_predict_shows_each_recall(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    # one head, as Zoology: 4 heads learn it too, but the epoch of the jump varies with the seed
    budget = ["task.train_size=3000", "task.test_size=500", "attention.num_heads=1", *NO_HEATMAPS]
    assert train(run, "task=mqar", *budget) == 0
    (record,) = results(run)
    assert record["choices"]["attention"] == "multi_head"  # the task's default mechanism
    assert record["metrics"]["test/acc"] >= 0.95

    example = MQARTask(seed=7, train_size=1, val_size=1, test_size=1)
    example.setup()
    src, tgt = example.splits["train"].src[0], example.splits["train"].tgt[0]
    text = " ".join(example.src_vocab.itos[i] for i in src.tolist())
    capsys.readouterr()
    assert cli(["predict", f"ckpt={record['checkpoint']}", f"input={text}", "top_k=2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "position  query -> predicted"
    answers = {
        int(line.split()[0]): line.split()[-1] for line in out[1:] if "->" in line and "<-" not in line
    }
    expected = {t: example.src_vocab.itos[y] for t, y in enumerate(tgt.tolist()) if y != PAD}
    assert set(expected) <= set(answers)  # every query shown (filler repeating a key may add more)
    assert sum(answers[t] == v for t, v in expected.items()) >= len(expected) - 1
    layers = [line for line in out if line.startswith("multi_head causal self-attention layer")]
    assert len(layers) == 2  # lm.num_layers, heads averaged, each with a line per query

    assert cli(["report", str(run)]) == 0
    table = capsys.readouterr().out
    assert "test/acc" in table and "test/exact_match" in table


def test_a_task_sets_the_default_mechanism_and_the_user_overrides_it(tmp_path: Path) -> None:
    assert train(tmp_path / "a", *TINY_LM, "attention=dot", *TINY_BUDGET) == 0
    assert results(tmp_path / "a")[0]["choices"]["attention"] == "dot"
    assert train(tmp_path / "b", "task=reverse", *TINY_BUDGET, "decoder.embed_dim=8") == 0
    assert results(tmp_path / "b")[0]["choices"]["attention"] == "additive"  # train.yaml's, for seq2seq


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["task.num_kv_pairs=20"], "task.num_kv_pairs=20 is invalid: must be <= seq_len / 4 = 16"),
        (["task.vocab_size=8", "task.num_kv_pairs=4"], "must be <= vocab_size / 2 - 1 = 3"),
        (["task.test_seq_len=32", "task.test_num_kv_pairs=9"], "task.test_num_kv_pairs=9 is invalid"),
        (["attention=none"], "attention=none: NoAttention cannot be a causal self-attention layer"),
        (["lm.positions=rotary"], "lm.positions must be one of sinusoidal, learned, none"),
        (["lm.num_layers=0"], "lm.num_layers=0: must be a positive integer"),
        (["lm.ff_dim=-1"], "lm.ff_dim=-1: must be a non-negative integer"),
        (["lm.ff=relu"], "lm.ff must be one of gelu, swiglu; got ff='relu'"),
        (["lm.conv=-1"], "lm.conv must be 0 (none) or a kernel size >= 1; got conv=-1"),
        (["lm.init=xavier"], "lm.init must be one of torch, normal; got init='xavier'"),
    ],
)
def test_bad_lm_configs_fail_before_training_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, overrides: list[str], expected: str
) -> None:
    assert train(tmp_path, "task=mqar", *overrides, *NO_HEATMAPS) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err, err
