"""End-to-end: the real `attnx train` CLI on tiny configs (in-process: Lightning is imported once)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnx.cli import main as cli
from attnx.config import compose as config

from helpers.runs import resolved
from helpers.tiny import (
    TINY,
    TINY_BUDGET,
    TINY_LM,
    TINY_RNN,
    TINY_SELF_ATTN,
    TINY_TRANSFORMER,
    results,
    train,
)

MECHANISMS = ["none", "fixed_c", "additive", "dot", "multi_head"]


@pytest.mark.parametrize(
    ("task", "encoder"),
    [
        ("reverse", TINY_RNN),
        ("sentiment", TINY_RNN),
        ("reverse", TINY_SELF_ATTN),
        ("sentiment", TINY_SELF_ATTN),
    ],
)
def test_every_mechanism_trains_and_records(tmp_path: Path, task: str, encoder: list[str]) -> None:
    train(tmp_path, f"task={task}", f"attention={','.join(MECHANISMS)}", *encoder, *TINY, sweep=True)
    records = results(tmp_path)
    assert sorted(r["choices"]["attention"] for r in records) == sorted(MECHANISMS)
    for r in records:
        assert r["status"] == "completed", r.get("error")
        assert r["choices"]["task"] == task
        assert r["params"] > 0 and r["train_seconds"] > 0 and r["samples_per_second"] > 0
        main_metric = "test/exact_match" if r["model_type"] == "seq2seq" else "test/acc"
        assert 0.0 <= r["metrics"][main_metric] <= 1.0
        assert {"val/loss", "test/loss"} <= set(r["metrics"])
        expected_score = {
            "none": None,
            "fixed_c": None,
            "additive": "additive",
            "dot": "dot",
            "multi_head": "scaled_dot",
        }[r["choices"]["attention"]]
        assert r["choices"]["score"] == expected_score
        checkpoint = torch.load(r["checkpoint"], map_location="cpu", weights_only=True)
        assert checkpoint["attnx_spec"]["attention"]["name"] == r["choices"]["attention"]


def test_predict_prints_output_and_attended_tokens(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    train(tmp_path, "task=reverse", "attention=additive", *TINY_RNN, *TINY)
    ckpt = tmp_path / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    assert cli(["predict", f"ckpt={ckpt}", "input=a b c"]) == 0
    out = capsys.readouterr().out.splitlines()
    heading, *steps = out[1:]  # after the output itself
    assert heading == "additive cross-attention: output step (queries) <- source (keys), top 3"
    assert steps and all("<-" in line for line in steps)  # one line per output step, its attended tokens

    # A checkpoint from an older version: an unversioned spec (ModelSpec's version 0), the mechanism under
    # another name, a hyperparameter since removed, the rnn decoder's sizes under `model` (before decoders
    # were a registry kind)
    checkpoint = torch.load(ckpt, map_location="cpu", weights_only=True)
    spec = checkpoint["attnx_spec"]
    del spec["version"], spec["classifier"]
    spec["attention"] = {"name": "bahdanau", "removed_since": 1}
    spec["model"] = {k: v for k, v in spec.pop("decoder").items() if k != "name"}
    torch.save(checkpoint, tmp_path / "old.ckpt")
    # (the removed hyperparameter is refused unless asked for: tests/e2e/predict/test_predict_strict.py)
    assert cli(["predict", f"ckpt={tmp_path / 'old.ckpt'}", "input=a b c", "strict=false"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == out
    assert cli(["predict", f"ckpt={ckpt}", "input=   "]) == 2
    assert capsys.readouterr().err.strip() == "attnx predict: input '   ' has no tokens"


def test_predict_classifies_and_shows_the_pooling_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    train(tmp_path, "task=sentiment", "attention=additive", *TINY_RNN, *TINY)
    classes = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["attnx_spec"]["classes"]
    capsys.readouterr()
    assert (
        cli(["predict", f"ckpt={tmp_path / 'checkpoints' / 'last.ckpt'}", "input=i really hate this movie"])
        == 0
    )
    label, heading, row = capsys.readouterr().out.splitlines()
    assert label.split()[0] in classes and label.split()[1].startswith("(p=")
    assert heading == "additive pooling: learned query (predicted class) <- source (keys), top 3"
    assert row.split()[0] == label.split()[0] and len(row.split("<-")[1].split()) == 3  # 3 attended words


def test_metrics_are_reproducible_with_a_seed(tmp_path: Path) -> None:
    for name in ("a", "b"):
        train(tmp_path / name, "task=reverse", "attention=dot", "seed=3", *TINY_RNN, *TINY)
    a, b = results(tmp_path / "a")[0], results(tmp_path / "b")[0]
    assert a["metrics"] == b["metrics"]


@pytest.mark.parametrize(
    "model",
    [
        ["task=reverse", "attention=additive", *TINY_RNN, *TINY, "decoder.dropout=0.3"],
        [
            "task=reverse",
            "attention=multi_head",
            "attention.num_heads=2",
            *TINY_SELF_ATTN,
            *TINY_BUDGET,
            *TINY_TRANSFORMER,
            "decoder.dropout=0.3",
        ],
        ["task=sentiment", "attention=dot", *TINY_SELF_ATTN, *TINY_BUDGET, "encoder.dropout=0.3"],
        [*TINY_LM, "attention.num_heads=2", *TINY_BUDGET, "lm.dropout=0.3"],
    ],
    ids=["rnn", "transformer", "classifier", "lm"],
)
def test_resume_reaches_the_same_metrics_as_an_uninterrupted_run(tmp_path: Path, model: list[str]) -> None:
    # A constant schedule: cosine's horizon is max_epochs itself, which the "stopped" run changes.
    common = [*model, "optim/scheduler=constant"]
    train(tmp_path / "straight", *common, "trainer.max_epochs=3")
    train(tmp_path / "resumed", *common, "trainer.max_epochs=1")
    train(tmp_path / "resumed", *common, "trainer.max_epochs=3", "resume=auto")
    straight, resumed = results(tmp_path / "straight")[0], results(tmp_path / "resumed")[0]
    assert resumed["resumed_from"].endswith("last.ckpt")
    assert resumed["steps"] == straight["steps"]
    assert resumed["metrics"] == pytest.approx(straight["metrics"], abs=1e-6)


def test_incompatible_score_fails_before_training(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert train(tmp_path, "attention=fixed_c", "score=dot", *TINY) == 2
    err = capsys.readouterr().err
    assert "attention=fixed_c uses no score function" in err and "score=dot" in err
    assert results(tmp_path)[0]["status"] == "failed"


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("attention=bahdanu", "unknown attention 'bahdanu'"),
        ("score=scaled-dot", "did you mean 'scaled_dot'"),
        ("task.no_such_key=1", "no_such_key"),
        ("score=cosine score.temperature=abc", "score.temperature"),
        ("task.train_size=-5", "train_size"),
        ("optim/scheduler=linear", "unknown optim/scheduler 'linear'"),
        ("optim.lr=-0.1", "optim.lr must be > 0"),
        ("task.min_len=9 task.max_len=4", "max_len"),
        ("attention=multi_head decoder.hidden_dim=10 attention.num_heads=3", "num_heads"),
    ],
)
def test_bad_input_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture, override: str, expected: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        code = train(tmp_path, *TINY, *override.split())
        raise SystemExit(code)
    assert exit_info.value.code != 0
    err = capsys.readouterr().err.strip()
    assert expected in err
    assert "Traceback" not in err


def test_a_required_plugin_hyperparameter_left_unset_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    plugin = tmp_path / "plugins" / "banded.py"
    plugin.parent.mkdir()
    plugin.write_text(
        "from attnx import register_score\n"
        "from attnx.nn.scores import DotScore\n\n"
        "@register_score('banded_test')\n"
        "class BandedScore(DotScore):\n"
        "    def __init__(self, query_dim: int, key_dim: int, width: int) -> None:\n"
        "        super().__init__(query_dim, key_dim)\n"
    )
    monkeypatch.setenv("ATTNX_PLUGIN_PATH", str(plugin.parent))
    assert train(tmp_path / "run", "attention=dot", "score=banded_test", *TINY) == 2
    assert "missing value for score.width" in capsys.readouterr().err
    # A sweep is refused before any job launches, naming the job (attnx.train.preflight)
    assert train(tmp_path / "sweep", "attention=dot", "score=banded_test", *TINY, sweep=True) == 2
    err = capsys.readouterr().err
    assert "job 0 (" in err and "missing value for score.width" in err and not results(tmp_path / "sweep")


def test_cfg_job_prints_the_resolved_config_fast_path() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "attnx.cli", "train", "attention=dot", "--cfg", "job"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "name: dot" in out and "input_feeding" in out and "name: reverse" in out


def test_stop_at_ends_training_once_the_validation_metric_reaches_the_threshold(tmp_path: Path) -> None:
    """callbacks.stop_at is Lightning's EarlyStopping(stopping_threshold): checked at every validation,
    here every 2 of an epoch's 3 batches; never reached, it changes nothing."""
    model = ["task=reverse", "attention=additive", *TINY_RNN, *TINY, "trainer.max_epochs=4"]
    loss_below = ["callbacks.model_checkpoint.monitor=val/loss", "trainer.val_check_interval=2"]
    train(tmp_path / "reached", *model, *loss_below, "callbacks.stop_at.stopping_threshold=100")
    train(tmp_path / "never", *model, *loss_below, "callbacks.stop_at.stopping_threshold=0")
    train(tmp_path / "bucketed", *model, "bucketing=true", "task.val_like_test=true", "task.test_max_len=12")
    reached, never, bucketed = (results(tmp_path / name)[0] for name in ("reached", "never", "bucketed"))
    assert reached["status"] == never["status"] == bucketed["status"] == "completed"
    assert reached["steps"] == 2 and never["steps"] == bucketed["steps"] == 12
    assert bucketed["config"]["task"]["val_like_test"] and bucketed["config"]["bucketing"]


def test_user_config_folders_join_the_overrides_not_the_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hydra.searchpath=[...]` goes among the overrides: put before `-m` it ended the run of positional
    arguments argparse takes, and a sweep launched with a ./conf folder failed as "unrecognized"."""
    from attnx.train.cli import with_search_path

    monkeypatch.setenv("ATTNX_CONFIG_PATH", str(tmp_path))
    [searchpath] = config.search_path_override()
    assert with_search_path(["-m", "task=a,b", "seed=1"]) == ["-m", searchpath, "task=a,b", "seed=1"]
    assert with_search_path(["seed=1", "--cfg", "job"]) == [searchpath, "seed=1", "--cfg", "job"]
    assert with_search_path(["--cfg", "job"]) == ["--cfg", "job", searchpath]


def test_exact_match_by_source_length_sums_to_the_test_exact_match(tmp_path: Path) -> None:
    train(tmp_path, *TINY_RNN, *TINY, "task.test_min_len=4", "task.test_max_len=9", "task.test_size=40")
    (record,) = results(tmp_path)
    by_length, examples = record["by_length"]["test/exact_match"], record["by_length"]["examples"]
    assert set(by_length) == set(examples) <= {str(n) for n in range(4, 10)} and sum(examples.values()) == 40
    overall = sum(by_length[n] * examples[n] for n in by_length) / 40
    assert overall == pytest.approx(record["metrics"]["test/exact_match"])


def test_paired_embeddings_start_every_mechanism_from_the_same_tables() -> None:
    from attnx import registry
    from attnx.lit import lit_module
    from attnx.train.assemble import model_spec

    registry.load_all()

    def embeddings(*overrides: str) -> dict[str, torch.Tensor]:
        run = resolved([*overrides, *TINY_RNN, *TINY])
        task = registry.build("task", run["task"])
        task.setup()
        torch.manual_seed(run["seed"])  # what seed_everything does before a run builds its model
        model = lit_module(model_spec(run.model_type, run.sections, task)).model
        return {n: p.detach().clone() for n, p in model.named_parameters() if "embed" in n}

    paired = [embeddings(f"attention={a}", "paired_embeddings=true") for a in ("additive", "dot", "fixed_c")]
    assert set(paired[0]) == {"encoder.embed.weight", "decoder.embed.weight"}
    assert all(torch.equal(paired[0][n], other[n]) for other in paired[1:] for n in paired[0])
    unpaired = [embeddings(f"attention={a}") for a in ("additive", "dot")]
    assert not torch.equal(unpaired[0]["decoder.embed.weight"], unpaired[1]["decoder.embed.weight"])
    other_seed = embeddings("attention=additive", "paired_embeddings=true", "seed=1")
    assert not torch.equal(paired[0]["encoder.embed.weight"], other_seed["encoder.embed.weight"])
