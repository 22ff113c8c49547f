"""Attention maps of a trained attnx model on a few examples, with the tokens that label their axes.

Only the contract's returned weights are read, so plugin mechanisms work unchanged and mechanisms
without weights (`none`, `fixed_c`) yield no map:
- seq2seq: decoder cross-attention per output step. The input is decoded as the model is evaluated
  (greedy or beam search) and the output then teacher-forced, which gives the weights behind each
  emitted token whatever the decoder (Bahdanau et al. 2015, Fig. 3);
- classification: the pooling weights over the input tokens;
- self-attention encoders (any encoder with `record_weights`): each layer's self-attention.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from textwrap import shorten
from typing import Any

import torch

from attnx import registry
from attnx.models.seq2seq import until_eos
from attnx.tasks.base import Batch
from attnx.vocab import BOS, Vocab


@dataclass
class AttentionMap:
    """One example's weights `[H, Q, K]` (H heads, or 1) with row (query) and column (key) labels,
    and what they show in words: the figure must read without its caption."""

    kind: str  # "cross", "pooling" or "self_layer<i>": the logger key and file name
    weights: torch.Tensor
    rows: list[str]
    cols: list[str]
    title: str  # the example: the output against the target, or the predicted class
    name: str  # the weights: "additive cross-attention", "self-attention layer 2"
    row_axis: str  # what the rows are: "output step (queries)"
    col_axis: str = "source (keys)"  # what the columns are
    averaged: int = 1  # heads averaged into each panel

    @property
    def panels(self) -> list[str]:
        """A title per head: "self-attention layer 2, head 3", "multi_head pooling, mean of 4 heads"."""
        if self.averaged > 1:
            return [f"{self.name}, mean of {self.averaged} heads"]
        heads = self.weights.shape[0]
        return [self.name] if heads == 1 else [f"{self.name}, head {h + 1}" for h in range(heads)]


@torch.no_grad()
def attention_maps(
    module: Any,
    batch: Batch,
    heads: str = "each",
    self_attention: bool = True,
    layers: list[int] | None = None,
) -> list[list[AttentionMap]]:
    """The maps of every example of `batch` (a list per example) for an attnx LightningModule.

    `heads`: "each" keeps one map per head, "mean" averages them. `self_attention` adds the
    encoder's self-attention of `layers` (indices, negative from the end; None = all)."""
    spec, encoder = module.spec, module.model.encoder
    recording = self_attention and hasattr(encoder, "record_weights")
    if recording:
        encoder.record_weights = True  # kept by the forward pass below, read back after it
    try:
        if spec["model_type"] == "seq2seq":
            maps = _cross_attention(module, batch)
        else:
            maps = _pooling(module.model, spec, batch)
        if recording:
            maps = [own + more for own, more in zip(maps, _self_attention(encoder, spec, batch, layers))]
    finally:
        if recording:
            encoder.record_weights = False
    return [[_heads(m, heads) for m in example] for example in maps]


def _sources(spec: dict[str, Any], batch: Batch) -> list[list[str]]:
    vocab = spec["src_itos"]
    return [[vocab[i] for i in row[:n]] for row, n in zip(batch.src.tolist(), batch.src_len.tolist())]


def _named(name: str, score: str | None, default: str | None) -> str:
    """`name`, plus the score function when it is not the mechanism's own (`dot` with `general`)."""
    return name if score in (None, default) else f"{name} ({score} score)"


def _mechanism(spec: dict[str, Any], role: str) -> str:
    """The mechanism as the run configured it, in `role`: "additive cross-attention", "dot pooling"."""
    name = spec["attention"]["name"]
    score = (spec.get("score") or {}).get("name")
    return _named(f"{name} {role}", score, registry.get("attention", name).default_score)


def _cross_attention(module: Any, batch: Batch) -> list[list[AttentionMap]]:
    output = module.decode(batch.src, batch.src_len)  # [B, L]: tokens, EOS, then PAD
    tgt_in = torch.cat([torch.full_like(output[:, :1], BOS), output[:, :-1]], dim=1)
    _, weights = module.model(batch.src, batch.src_len, tgt_in, need_weights=True)
    if weights is None:
        return [[] for _ in range(len(batch.src))]
    weights = weights if weights.dim() == 4 else weights.unsqueeze(1)  # [B, H, L, Tk]
    steps = until_eos(output).sum(1).tolist()  # emitted tokens, EOS included
    tgt_vocab = Vocab(module.spec["tgt_itos"])
    name = _mechanism(module.spec, "cross-attention")
    maps = []
    for b, source in enumerate(_sources(module.spec, batch)):
        words = tgt_vocab.decode(output[b].tolist())
        emitted = [*words, "<eos>"][: steps[b]]
        title = " ".join(words)
        if batch.tgt is not None:  # labelled data (heatmaps); `attnx predict` has none
            target = tgt_vocab.decode(batch.tgt[b, 1:].tolist())
            title = "output = target" if words == target else shorten(f"target: {' '.join(target)}", 70)
        w = weights[b, :, : steps[b], : len(source)]
        maps.append([AttentionMap("cross", w, emitted, source, title, name, "output step (queries)")])
    return maps


def _pooling(model: Any, spec: dict[str, Any], batch: Batch) -> list[list[AttentionMap]]:
    logits, weights = model(batch.src, batch.src_len, need_weights=True)
    if weights is None:
        return [[] for _ in range(len(batch.src))]
    weights = weights if weights.dim() == 3 else weights.unsqueeze(1)  # [B, H, T]
    classes = spec["classes"]
    predicted = logits.argmax(-1).tolist()
    name = _mechanism(spec, "pooling")
    maps = []
    for b, source in enumerate(_sources(spec, batch)):
        truth = classes[int(batch.label[b])] if batch.label is not None else "?"
        title = f"predicted {classes[predicted[b]]} (true: {truth})"
        w = weights[b, :, None, : len(source)]  # one query row per head
        axis = "learned query (predicted class)"
        maps.append([AttentionMap("pooling", w, [classes[predicted[b]]], source, title, name, axis)])
    return maps


def _self_attention(
    encoder: Any, spec: dict[str, Any], batch: Batch, layers: list[int] | None
) -> list[list[AttentionMap]]:
    """Maps from the weights the encoder recorded during the pass above ([B, H, T', T'] per layer;
    T' = T + 1 when a CLS token leads the sequence)."""
    recorded = encoder.attention_weights
    chosen = range(len(recorded)) if layers is None else [i % len(recorded) for i in layers]
    name, score = spec["encoder"]["name"], spec["encoder"].get("score")
    default = registry.registry("encoder").entry(name).hyperparams().get("score")
    names = {i: _named(f"self-attention layer {i + 1}", score, default) for i in chosen}
    title, rows = f"{name} encoder", "source (queries)"
    maps: list[list[AttentionMap]] = []
    for b, source in enumerate(_sources(spec, batch)):
        example = []
        for i in chosen:
            w = recorded[i][b]
            labels = (["<cls>"] if w.shape[-1] > batch.src.shape[1] else []) + source
            n = len(labels)
            kind = f"self_layer{i + 1}"
            example.append(AttentionMap(kind, w[:, :n, :n], labels, labels, title, names[i], rows))
        maps.append(example)
    return maps


def _heads(attention_map: AttentionMap, heads: str) -> AttentionMap:
    weights, averaged = attention_map.weights, 1
    if heads == "mean":
        weights, averaged = weights.mean(0, keepdim=True), len(weights)
    return replace(attention_map, weights=weights.float().cpu(), averaged=averaged)
