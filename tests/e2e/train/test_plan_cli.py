"""Per-layer plans through the real CLI. An lm's (`lm.layers`): a plan trains, its record names it, its
checkpoint loads and decodes (`attnx generate`), plans sweep with `-m`, with heatmaps of each layer; the
Based recipe (`lm=based`). A self-attention encoder's (`encoder.layers`), for a classifier and a seq2seq
model alike. Bad plans are one line naming the layer and the key, exit 2, nothing trained."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnx import registry
from attnx.cli import main as cli
from attnx.config.compose import compose
from attnx.predict import load

from helpers.tiny import (
    ONE_EPOCH,
    TINY,
    TINY_BUDGET,
    TINY_LM,
    TINY_MODEL,
    TINY_RNN,
    TINY_SELF_ATTN,
    completed,
    results,
    sizes,
    train,
)

PLAN = "lm.layers=[{name:sliding_window,num_heads:2,window:4},{name:linear,num_heads:2}]"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("plan")
    record = completed(folder, *TINY_LM, "lm.num_layers=4", PLAN, *ONE_EPOCH, *sizes())
    assert record["choices"]["attention"] == "sliding_window+linear" and record["choices"]["score"] is None
    assert record["config"]["lm"]["layers"][1] == {"name": "linear", "num_heads": 2}  # completed, typed
    return folder


def test_a_plans_checkpoint_loads_with_each_layers_mechanism_and_decodes(
    run: Path, capsys: pytest.CaptureFixture
) -> None:
    loaded = load(str(next(run.rglob("last.ckpt"))))
    kinds = [type(block.attention.mechanism).__name__ for block in loaded.model.blocks]
    assert kinds == ["SlidingWindowAttention", "LinearAttention"] * 2
    window = loaded.model.blocks[2].attention.mechanism
    assert window.window == 4 and window.num_heads == 2
    prompt = " ".join(loaded.spec.src_itos[4:9])
    capsys.readouterr()
    assert cli(["generate", str(run), prompt, "--max-new-tokens", "4"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out.splitlines()
    continuation = out[1].removeprefix("continuation: ").split()
    tokens = torch.tensor([[loaded.spec.src_itos.index(t) for t in prompt.split()]])
    with torch.no_grad():
        for _ in range(4):
            logits, _ = loaded.model(tokens, torch.tensor([tokens.size(1)]))
            tokens = torch.cat([tokens, logits[:, -1:, 4:].argmax(-1) + 4], dim=1)
    assert continuation == [loaded.spec.src_itos[i] for i in tokens[0, 5:].tolist()]


def test_a_runs_record_holds_its_decoding_state_at_the_test_length(run: Path) -> None:
    (record,) = results(run)
    model = load(str(next(run.rglob("last.ckpt")))).model
    assert record["state_at"] == 16  # TINY_LM's seq_len: every MQAR test sequence is that long
    assert record["state_bytes"] == model.state_bytes(16) == 4 * model.state_size(16)  # float32 numbers


def test_plans_sweep_from_the_command_line_and_their_heatmaps_cover_each_layer(tmp_path: Path) -> None:
    plans = "lm.layers=[{name:linear}],[{name:sliding_window,window:4},{name:linear}]"
    budget = [*ONE_EPOCH, *sizes(train=16, val=8, test=8)]
    assert train(tmp_path, *TINY_LM, "lm.num_layers=2", plans, *budget, sweep=True) == 0
    records = results(tmp_path)
    assert [r["choices"]["attention"] for r in records] == ["linear", "sliding_window+linear"]
    for record in records:
        assert record["status"] == "completed", record.get("error")
        drawn = {
            p.name.split("_")[1] for p in (Path(record["output_dir"]) / "attention_maps" / "test").iterdir()
        }
        assert drawn == {"layer1", "layer2"}


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        (
            "lm.layers=[{name:linear},{name:local_window}]",
            "lm.layers.1.name=local_window: LocalAttention cannot be a causal self-attention layer",
        ),
        ("lm.layers=[{name:linear},{name:linearr}]", "lm.layers.1.name: unknown attention 'linearr'"),
        ("lm.layers=[{name:linear},{name:linear},{name:linear}]", "lm.layers has 3 entries, more than"),
        (
            "lm.layers=[{name:linear},{name:linear},{name:linear}] lm.num_layers=4",
            "lm.layers has 3 entries, not a divisor of lm.num_layers=4",
        ),
        ("lm.layers=[{name:sliding_window,windw:3}]", "lm.layers.0.windw: attention sliding_window takes no"),
        ("lm.layers=[{name:sliding_window,window:0}]", "lm.layers.0.window=0: must be a positive integer"),
        ("lm.layers=[{name:linear}] score=dot", "score=dot: an lm with lm.layers takes each layer's score"),
    ],
)
def test_a_bad_plan_is_one_line_naming_the_layer_and_the_key_exit_2_nothing_trained(
    tmp_path: Path, capsys: pytest.CaptureFixture, plan: str, expected: str
) -> None:
    capsys.readouterr()
    assert train(tmp_path / "run", *TINY_LM, "lm.num_layers=2", *plan.split(), *TINY_BUDGET) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnx train: {expected}") and err.count("\n") == 1, err
    assert not list(tmp_path.rglob("*.ckpt"))  # nothing trained


def test_a_plan_for_a_model_without_an_lm_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    capsys.readouterr()
    assert train(tmp_path, "task=reverse", "lm.layers=[{name:linear}]", *TINY_RNN, *TINY) == 2
    err = capsys.readouterr().err
    expected = (
        "lm.layers: task reverse trains a seq2seq model, which has no lm; a plan chooses an lm's layers"
    )
    assert err.startswith(f"attnx train: {expected}") and err.count("\n") == 1, err
    assert not list(tmp_path.rglob("*.ckpt"))  # nothing trained


@pytest.mark.skipif(
    "base_conv" not in registry.available("attention"),
    reason="base_conv (the gated convolution of Zoology's Based) is not registered in this attnx yet",
)
def test_the_based_recipe_trains_base_conv_and_based_alternating(tmp_path: Path) -> None:
    record = completed(tmp_path, *TINY_LM, "lm=based", "lm.num_layers=2", *TINY_BUDGET)
    assert record["choices"]["attention"] == "base_conv+based"


def test_the_based_recipe_is_base_conv_then_based_over_lm_defaults() -> None:
    cfg = compose(["task=mqar", "lm=based", "lm.num_layers=4"])
    assert [layer["name"] for layer in cfg.lm.layers] == ["base_conv", "based"]
    assert cfg.lm.layers[1].feature_dim == 16 and cfg.lm.d_model == compose(["task=mqar"]).lm.d_model


ENCODER_PLAN = "encoder.layers=[{name:multi_head,num_heads:2},{name:local_window,window:1}]"


@pytest.mark.parametrize(
    "task",
    [["task=sentiment", "attention=additive"], ["task=reverse", *TINY_MODEL]],
    ids=["classifier", "seq2seq"],
)
def test_an_encoder_plan_trains_and_its_checkpoint_loads_each_layers_mechanism(
    tmp_path: Path, task: list[str]
) -> None:
    record = completed(tmp_path, *task, *TINY_SELF_ATTN, "encoder.num_layers=4", ENCODER_PLAN, *TINY_BUDGET)
    window = {"name": "local_window", "window": 1, "predict_centre": True}  # completed with its defaults
    assert record["config"]["encoder"]["layers"] == [
        {"name": "multi_head", "num_heads": 2, "dropout": 0.0},
        window,
    ]
    loaded = load(str(next(tmp_path.rglob("last.ckpt"))))
    kinds = [type(block.attention.mechanism).__name__ for block in loaded.model.encoder.blocks]
    assert kinds == ["MultiHeadAttention", "LocalAttention"] * 2


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        (
            "encoder.layers=[{name:multi_head},{name:fixed_c}]",
            "encoder.layers.1.name=fixed_c: FixedContext cannot be a self-attention layer",
        ),
        ("encoder.layers=[{name:multi_head},{name:nope}]", "encoder.layers.1.name: unknown attention 'nope'"),
        (
            "encoder.layers=[{name:multi_head,windw:3}]",
            "encoder.layers.0.windw: attention multi_head takes no",
        ),
        (
            "encoder.layers=[{name:linear},{name:linear},{name:linear}]",
            "encoder.layers has 3 entries, more than encoder.num_layers=2",
        ),
        (
            "encoder.layers=[{name:linear}] encoder/score=general",
            "encoder.score=general: encoder.layers takes each layer's score from its entry",
        ),
    ],
)
def test_a_bad_encoder_plan_is_one_line_naming_the_layer_and_the_key_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture, plan: str, expected: str
) -> None:
    capsys.readouterr()
    overrides = ["task=sentiment", *TINY_SELF_ATTN, "encoder.num_layers=2", *plan.split(), *TINY_BUDGET]
    assert train(tmp_path / "run", *overrides) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnx train: {expected}") and err.count("\n") == 1, err
    assert not list(tmp_path.rglob("*.ckpt"))  # nothing trained
