"""Assemble a model from the config sections `encoder`, `decoder`, `lm`, `attention`, `score` and
`classifier`, or from a `ModelSpec` that holds them, on the attention sites those sections describe
(`attnx.models.sites`, resolved once: by config validation, or here when no one has).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from attnx import registry
from attnx.models.classifier import Classifier
from attnx.models.lm import CausalLM
from attnx.models.seq2seq import Seq2Seq
from attnx.models.sites import Sites, resolve_sites, slot_sites
from attnx.models.spec import CLASSIFIER_KEYS, ModelSpec, check_model_type
from attnx.nn.attention import Mechanism


def build_host(
    kind: str, section: Mapping[str, Any], slots: dict[str, Mechanism] | None = None, **structural: Any
) -> Any:
    """`registry.build` for a class that may host slots: their sections become Mechanisms (`slots`, when
    the sites are resolved already)."""
    if slots is None:
        slots = {name: found.mechanism for name, found in slot_sites(kind, section).items()}
    fields = set(registry.slot_fields(registry.get(kind, section["name"])))
    plain = {k: v for k, v in section.items() if k not in fields}
    return registry.build(kind, plain, **structural, **slots)


def build_model(
    model_type: str,
    src_vocab: int,
    encoder: Mapping[str, Any] | None,
    attention: Mapping[str, Any],
    score: Mapping[str, Any] | None,
    classifier: Mapping[str, Any] | None,
    decoder: Mapping[str, Any] | None = None,
    tgt_vocab: int | None = None,
    num_classes: int | None = None,
    lm: Mapping[str, Any] | None = None,
    sites: Sites | None = None,
) -> nn.Module:
    """A `Seq2Seq` (model_type "seq2seq", needs decoder and tgt_vocab), a `Classifier`
    ("classification", needs num_classes) or a `CausalLM` ("lm", needs lm), on `sites` when config
    validation has resolved them from these sections, else on the sites resolved here."""
    model_type = check_model_type(model_type)
    classifier = classifier or {}
    unknown = sorted(set(classifier) - set(CLASSIFIER_KEYS))
    if unknown:
        raise ValueError(
            f"unknown classifier key(s) {', '.join(unknown)}; allowed: {', '.join(CLASSIFIER_KEYS)}"
        )
    if sites is None:
        sites = resolve_sites(model_type, encoder, attention, score, decoder)
    run = sites.attention.mechanism
    if model_type == "lm":
        if lm is None:
            raise ValueError("an lm model needs an lm section")
        return CausalLM(src_vocab, run, **lm)
    assert encoder is not None  # the sites have checked it
    enc = build_host("encoder", encoder, sites.mechanisms("encoder"), vocab_size=src_vocab)
    if model_type == "classification":
        if num_classes is None:
            raise ValueError("a classification model needs num_classes")
        pooling = run(enc.output_dim, enc.output_dim, enc.output_dim)
        return Classifier(enc, pooling, num_classes, **classifier)
    if tgt_vocab is None or decoder is None:
        raise ValueError("a seq2seq model needs tgt_vocab")
    dec = build_host(
        "decoder",
        decoder,
        sites.mechanisms("decoder"),
        vocab_size=tgt_vocab,
        enc_dim=enc.output_dim,
        cross_attention=run,
    )
    return Seq2Seq(enc, dec)


def model_from_spec(spec: ModelSpec, sites: Sites) -> nn.Module:
    """The model `spec` describes, on its `sites` (validation's, or `Sites.of(spec)`), its embedding
    tables drawn from the spec's `embedding_seed` when it has one."""
    model = build_model(
        spec.model_type,
        len(spec.src_itos),
        spec.encoder,
        spec.attention,
        spec.score,
        spec.classifier,
        decoder=spec.decoder,
        tgt_vocab=len(spec.tgt_itos) if spec.tgt_itos else None,
        num_classes=len(spec.classes) if spec.classes else None,
        lm=spec.lm,
        sites=sites,
    )
    if spec.embedding_seed is not None:
        share_embeddings(model, spec.embedding_seed)
    return model


def share_embeddings(model: nn.Module, seed: int) -> None:
    """Redraw every embedding table of `model` from a generator of its own, seeded by `seed` and the
    table's name in the model, from nn.Embedding's own N(0, 1) with the padding row zero. Models that
    differ only in their mechanism then start from the same embeddings whenever the shapes agree: the
    global stream's draws before a table depend on every parameter built before it."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Embedding):
            generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
            with torch.no_grad():
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator))
                if module.padding_idx is not None:
                    module.weight[module.padding_idx].zero_()
