"""Attention maps of a trained attnx model on a few examples, with the tokens that label their axes.

Each map names the mechanism behind it as the model's checked attention sites have it (`module.sites`,
the ones its model was built on). Only the contract's returned weights are read, so plugin mechanisms
work unchanged and mechanisms without weights (`none`, `fixed_c`) yield no map:
- seq2seq: decoder cross-attention per output step. The input is decoded as the model is evaluated
  (greedy or beam search) and the output then teacher-forced, which gives the weights behind each
  emitted token whatever the decoder (Bahdanau et al. 2015, Fig. 3);
- classification: the pooling weights over the input tokens;
- lm: each layer's causal self-attention over the input, always (it is the model's only attention);
- self-attention encoders and decoders (any with `record_weights`): each layer's self-attention, on
  request; a Transformer decoder's cross-attention map is its last layer's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from textwrap import shorten
from typing import Any

import torch

from attnx.models.seq2seq import until_eos
from attnx.models.sites import Sites
from attnx.models.spec import ModelSpec
from attnx.tasks.base import Batch
from attnx.vocab import BOS, PAD, Vocab


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
    """The maps of every example of `batch` (a list per example) for an attnx LightningModule, drawn by
    its model type's `maps` piece (`lm_maps`, `seq2seq_maps`, `pooling_maps`, or a plugin's).

    `heads`: "each" keeps one map per head, "mean" averages them. `self_attention` adds the
    encoder's self-attention of `layers` (indices, negative from the end; None = all)."""
    maps = module.spec.declared.piece("maps")(module, batch, self_attention, layers)
    return [[_heads(m, heads) for m in example] for example in maps]


def lm_maps(
    module: Any, batch: Batch, self_attention: bool, layers: list[int] | None
) -> list[list[AttentionMap]]:
    """An lm's self-attention of `layers`, always: it is the model's only attention."""
    return _language_model(module, batch, layers)


def seq2seq_maps(
    module: Any, batch: Batch, self_attention: bool, layers: list[int] | None
) -> list[list[AttentionMap]]:
    """A decoder's cross-attention per output step, then (`self_attention`) its hosts' self-attention."""
    return _with_self_attention(module, batch, self_attention, layers, _cross_attention)


def pooling_maps(
    module: Any, batch: Batch, self_attention: bool, layers: list[int] | None
) -> list[list[AttentionMap]]:
    """A classifier's pooling weights, then (`self_attention`) its encoder's self-attention."""
    return _with_self_attention(module, batch, self_attention, layers, _pooling)


def _with_self_attention(
    module: Any,
    batch: Batch,
    self_attention: bool,
    layers: list[int] | None,
    own: Callable[[Any, Batch], list[list[AttentionMap]]],
) -> list[list[AttentionMap]]:
    """`own` maps, with the self-attention of every part that records its weights (`record_weights`: a
    self-attention encoder, a Transformer decoder) recorded during `own`'s forward pass, on request."""
    model = module.model
    parts = (model.encoder, getattr(model, "decoder", None))
    recorders = [m for m in parts if m is not None and hasattr(m, "record_weights")] if self_attention else []
    for recorder in recorders:
        recorder.record_weights = True  # kept by the forward pass below, read back after it
    try:
        maps = own(module, batch)
        if model.encoder in recorders:
            maps = [
                mine + more for mine, more in zip(maps, _self_attention(model.encoder, module, batch, layers))
            ]
        if getattr(model, "decoder", None) in recorders:
            decoder_maps = _decoder_self_attention(model.decoder, module.sites, maps, layers)
            maps = [mine + more for mine, more in zip(maps, decoder_maps)]
    finally:
        for recorder in recorders:
            recorder.record_weights = False
    return maps


def _sources(spec: ModelSpec, batch: Batch) -> list[list[str]]:
    vocab = spec.src_itos
    return [[vocab[i] for i in row[:n]] for row, n in zip(batch.src.tolist(), batch.src_len.tolist())]


def _cross_attention(module: Any, batch: Batch) -> list[list[AttentionMap]]:
    output = module.decode(batch.src, batch.src_len)  # [B, L]: tokens, EOS, then PAD
    tgt_in = torch.cat([torch.full_like(output[:, :1], BOS), output[:, :-1]], dim=1)
    _, weights = module.model(batch.src, batch.src_len, tgt_in, need_weights=True)
    if weights is None:
        return [[] for _ in range(len(batch.src))]
    weights = weights if weights.dim() == 4 else weights.unsqueeze(1)  # [B, H, L, Tk]
    steps = until_eos(output).sum(1).tolist()  # emitted tokens, EOS included
    tgt_vocab = Vocab(module.spec.tgt_itos)
    name = module.sites.attention.describe("cross-attention")
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


def _pooling(module: Any, batch: Batch) -> list[list[AttentionMap]]:
    spec = module.spec
    logits, weights = module.model(batch.src, batch.src_len, need_weights=True)
    if weights is None:
        return [[] for _ in range(len(batch.src))]
    weights = weights if weights.dim() == 3 else weights.unsqueeze(1)  # [B, H, T]
    classes = spec.classes
    predicted = logits.argmax(-1).tolist()
    name = module.sites.attention.describe("pooling")
    maps = []
    for b, source in enumerate(_sources(spec, batch)):
        truth = classes[int(batch.label[b])] if batch.label is not None else "?"
        title = f"predicted {classes[predicted[b]]} (true: {truth})"
        w = weights[b, :, None, : len(source)]  # one query row per head
        axis = "learned query (predicted class)"
        maps.append([AttentionMap("pooling", w, [classes[predicted[b]]], source, title, name, axis)])
    return maps


def _language_model(module: Any, batch: Batch, layers: list[int] | None) -> list[list[AttentionMap]]:
    """An lm's self-attention per layer, queries and keys both the input; titled with how many of the
    example's targets (an MQAR sequence's queries) the model predicts right."""
    spec = module.spec
    logits, weights = module.model(batch.src, batch.src_len, need_weights=True)
    chosen = [i for i in _chosen(weights, layers) if weights[i] is not None]
    tgt = batch.tgt
    right = None if tgt is None else logits.argmax(-1) == tgt
    layer_sites = module.sites.layers(len(weights))
    maps = []
    for b, source in enumerate(_sources(spec, batch)):
        title = "the input"
        if tgt is not None and right is not None:
            targets = tgt[b] != PAD
            title = f"{int(right[b][targets].sum())}/{int(targets.sum())} targets predicted right"
        n = len(source)
        maps.append(
            [
                AttentionMap(
                    f"self_layer{i + 1}",
                    _per_head(weights[i][b])[:, :n, :n],
                    source,
                    source,
                    title,
                    layer_sites[i].describe(f"causal self-attention layer {i + 1}"),
                    "position (queries)",
                    "position (keys)",
                )
                for i in chosen
            ]
        )
    return maps


def _slot_name(sites: Sites, kind: str, what: str, layer: int) -> str:
    """The mechanism of `kind`'s (first) slot at `layer` as configured (a plan's entry there): "multi_head
    self-attention layer 2"."""
    return sites.slot_layer(kind, layer).describe(what)


def _chosen(recorded: list[Any], layers: list[int] | None) -> list[int]:
    return list(range(len(recorded))) if layers is None else [i % len(recorded) for i in layers]


def _per_head(w: torch.Tensor) -> torch.Tensor:
    """[(H,) Q, K] -> [H, Q, K]: single-head mechanisms give one panel."""
    return w if w.dim() == 3 else w.unsqueeze(0)


def _self_attention(
    encoder: Any, module: Any, batch: Batch, layers: list[int] | None
) -> list[list[AttentionMap]]:
    """Maps from the weights the encoder recorded during the pass above ([B, (H,) T', T'] per layer;
    T' = T + 1 when a CLS token leads the sequence); none for a mechanism without weights."""
    recorded = encoder.attention_weights
    chosen = [i for i in _chosen(recorded, layers) if recorded[i] is not None]
    spec = module.spec
    title, rows = f"{spec.encoder['name']} encoder", "source (queries)"
    maps: list[list[AttentionMap]] = []
    for b, source in enumerate(_sources(spec, batch)):
        example = []
        for i in chosen:
            w = _per_head(recorded[i][b])
            labels = (["<cls>"] if w.shape[-1] > batch.src.shape[1] else []) + source
            n = len(labels)
            kind = f"self_layer{i + 1}"
            name = _slot_name(module.sites, "encoder", f"self-attention layer {i + 1}", i)
            example.append(AttentionMap(kind, w[:, :n, :n], labels, labels, title, name, rows))
        maps.append(example)
    return maps


def _decoder_self_attention(
    decoder: Any, sites: Sites, maps: list[list[AttentionMap]], layers: list[int] | None
) -> list[list[AttentionMap]]:
    """The decoder's causal self-attention from its recorded pass over the emitted output: query t is the
    step that emitted output t, and it reads the decoder's inputs <bos>, y_1, .., y_t."""
    recorded = decoder.attention_weights.get("self", [])
    chosen = [i for i in _chosen(recorded, layers) if recorded[i] is not None]
    found: list[list[AttentionMap]] = []
    for b, example in enumerate(maps):
        cross = next((m for m in example if m.kind == "cross"), None)
        if cross is None:  # cross-attention without weights: the emitted steps are unknown here
            found.append([])
            continue
        steps, inputs = len(cross.rows), ["<bos>", *cross.rows[:-1]]
        found.append(
            [
                AttentionMap(
                    f"decoder_self_layer{i + 1}",
                    _per_head(recorded[i][b])[:, :steps, :steps],
                    cross.rows,
                    inputs,
                    cross.title,
                    _slot_name(sites, "decoder", f"decoder self-attention layer {i + 1}", i),
                    "output step (queries)",
                    "decoder input (keys)",
                )
                for i in chosen
            ]
        )
    return found


def _heads(attention_map: AttentionMap, heads: str) -> AttentionMap:
    weights, averaged = attention_map.weights, 1
    if heads == "mean":
        weights, averaged = weights.mean(0, keepdim=True), len(weights)
    return replace(attention_map, weights=weights.float().cpu(), averaged=averaged)
