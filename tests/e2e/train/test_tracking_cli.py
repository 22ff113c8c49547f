"""Tracking: W&B offline runs (no network here), TensorBoard event files, and attention heatmaps. A sweep's
dashboards (W&B's offline run files record by record, TensorBoard in a browser): test_dashboards.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from matplotlib.figure import Figure
from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator

from attnx import registry
from attnx.predict import load
from attnx.tasks.base import Batch
from attnx.track.heatmaps import heatmap
from attnx.track.maps import attention_maps
from attnx.vocab import EOS, Vocab

from helpers.tiny import TINY_BUDGET, TINY_DRAWN, TINY_RNN, TINY_SELF_ATTN, TINY_TRANSFORMER, results, train


def test_a_logged_in_run_without_network_falls_back_to_offline(
    no_wandb_account: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens: connection refused
    train(tmp_path, "logger=wandb", "logger.wandb.init_timeout=1", "attention=dot", *TINY_RNN, *TINY_DRAWN)
    assert results(tmp_path)[0]["status"] == "completed"
    assert len(list((tmp_path / "wandb").glob("offline-run-*/files/media/images/test/attention/*.png"))) == 4


def test_tensorboard_event_files_hold_the_heatmap_figures(tmp_path: Path) -> None:
    train(tmp_path, "logger=tensorboard", "attention=multi_head", *TINY_RNN, *TINY_DRAWN)
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={IMAGES: 0}).Reload()
    tags = events.Tags()["images"]
    assert {f"test/attention/cross/{i}" for i in range(4)} <= set(tags)
    image = events.Images("test/attention/cross/0")[0]
    assert image.encoded_image_string.startswith(b"\x89PNG") and image.width > 100


def test_mechanisms_without_weights_train_and_draw_nothing(tmp_path: Path) -> None:
    train(tmp_path, "attention=none,fixed_c", *TINY_RNN, *TINY_DRAWN, sweep=True)
    assert [r["status"] for r in results(tmp_path)] == ["completed", "completed"]
    assert not list(tmp_path.rglob("*.png"))


def panels(figure: Figure) -> list[tuple[str, str]]:
    """(title, key-axis label) of each heatmap panel; the colour bar, last, must say what it shows."""
    *heads, colour_bar = figure.axes
    assert colour_bar.get_ylabel() == "attention weight"
    # label_outer leaves the key-axis label on the top row only: the panels below share it
    top = heads[0].get_xlabel()
    return [(ax.get_title(), ax.get_xlabel() or top) for ax in heads if ax.axison]


def _trained(tmp: Path, *overrides: str) -> tuple[Any, Batch]:
    """A module trained for one tiny epoch, loaded back from its checkpoint, and two validation examples."""
    train(tmp, *overrides, *TINY_DRAWN)
    module = load(str(tmp / "checkpoints" / "last.ckpt"))
    task = registry.build("task", module.spec.task)
    return module, next(iter(task.dataloader("val", batch_size=2)))


def test_pooling_maps_per_head_and_layer_are_labelled_with_the_input_tokens(tmp_path: Path) -> None:
    encoder = [*TINY_SELF_ATTN, "encoder.summary=cls"]
    module, batch = _trained(
        tmp_path, "task=sentiment", *encoder, "attention=multi_head", "attention.num_heads=4"
    )
    assert len(list((tmp_path / "attention_maps" / "test").glob("pooling_*.png"))) == 4
    pooling, last_layer = attention_maps(module, batch, heads="each", layers=[-1])[0]
    n = int(batch.src_len[0])
    assert pooling.kind == "pooling" and pooling.weights.shape == (4, 1, n)
    assert pooling.cols == [module.spec.src_itos[i] for i in batch.src[0, :n]]
    torch.testing.assert_close(pooling.weights.sum(-1), torch.ones(4, 1))
    assert last_layer.kind == "self_layer1" and last_layer.weights.shape == (2, n + 1, n + 1)
    assert last_layer.rows == last_layer.cols == ["<cls>", *pooling.cols]
    assert not module.model.encoder.record_weights  # back off: training keeps the fused SDPA path
    (mean,) = attention_maps(module, batch, heads="mean", self_attention=False)[0]
    torch.testing.assert_close(mean.weights, pooling.weights.mean(0, keepdim=True))

    # Each figure reads without a caption: the panel says what it shows, the axes what they are.
    figure = heatmap(pooling)
    assert panels(figure) == [(f"multi_head pooling, head {h}", "source (keys)") for h in range(1, 5)]
    assert figure.get_supylabel() == "learned query (predicted class)"
    assert panels(heatmap(mean)) == [("multi_head pooling, mean of 4 heads", "source (keys)")]
    figure = heatmap(last_layer)
    assert panels(figure) == [
        (f"multi_head self-attention layer 1, head {h}", "source (keys)") for h in (1, 2)
    ]
    assert figure.get_supylabel() == "source (queries)" and figure.get_suptitle() == "self_attn encoder"


def test_cross_attention_maps_are_the_decoding_weights_one_row_per_emitted_token(tmp_path: Path) -> None:
    module, batch = _trained(tmp_path, "task=reverse", "attention=dot", *TINY_RNN)
    output = module.decode(batch.src, batch.src_len)
    _, decoding_weights = module.model.greedy(batch.src, batch.src_len, output.shape[1])
    vocab = Vocab(module.spec.tgt_itos)
    for b, ((cross,), n) in enumerate(zip(attention_maps(module, batch), batch.src_len.tolist())):
        emitted = vocab.decode(output[b].tolist()) + (["<eos>"] if EOS in output[b] else [])
        assert cross.rows == emitted and cross.cols == [module.spec.src_itos[i] for i in batch.src[b, :n]]
        torch.testing.assert_close(cross.weights[0], decoding_weights[b, : len(emitted), :n])
        figure = heatmap(cross)
        assert panels(figure) == [("dot cross-attention", "source (keys)")]
        assert figure.get_supylabel() == "output step (queries)" and figure.get_suptitle() == cross.title


def test_a_transformer_shows_cross_attention_and_both_self_attentions(tmp_path: Path) -> None:
    """Cross-attention rows are the cached decoding's weights; decoder self-attention is causal, each
    output step reading the decoder inputs up to its own."""
    train(tmp_path, "task=reverse", "attention=dot", *TINY_SELF_ATTN, *TINY_TRANSFORMER, *TINY_BUDGET)
    module = load(str(tmp_path / "checkpoints" / "last.ckpt"))
    task = registry.build("task", module.spec.task)
    batch = next(iter(task.dataloader("val", batch_size=2)))
    output = module.decode(batch.src, batch.src_len)
    _, decoding_weights = module.model.greedy(batch.src, batch.src_len, output.shape[1])
    for b, maps in enumerate(attention_maps(module, batch, heads="each")):
        cross, encoder_self, decoder_self = maps
        assert [m.kind for m in maps] == ["cross", "self_layer1", "decoder_self_layer1"]
        steps, n = len(cross.rows), int(batch.src_len[b])
        torch.testing.assert_close(cross.weights[0], decoding_weights[b, :steps, :n], atol=1e-5, rtol=1e-5)
        assert decoder_self.rows == cross.rows and decoder_self.cols == ["<bos>", *cross.rows[:-1]]
        assert decoder_self.weights.shape == (2, steps, steps)  # decoder.attention.num_heads=2
        assert (decoder_self.weights.triu(1) == 0).all()  # no step reads a later input
        assert decoder_self.name == "multi_head decoder self-attention layer 1"
        assert encoder_self.weights.shape == (2, n, n)
    assert not module.model.decoder.record_weights
