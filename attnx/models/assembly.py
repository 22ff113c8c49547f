"""Assemble a model from the config sections `encoder`, `decoder`, `lm`, `attention`, `score` and
`classifier`, or from a `ModelSpec` that holds them, on the attention sites those sections describe
(`attnx.models.sites`, resolved once: by config validation, or here when no one has).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnx import registry
from attnx.models.classifier import Classifier
from attnx.models.lm import CausalLM
from attnx.models.seq2seq import Seq2Seq
from attnx.models.sites import Sites, resolve_sites, slot_sites
from attnx.models.spec import CLASSIFIER_KEYS, ModelSpec
from attnx.nn.attention import Mechanism


def build_host(
    kind: str,
    section: Mapping[str, Any],
    slots: Mapping[str, Mechanism | list[Mechanism]] | None = None,
    **structural: Any,
) -> Any:
    """`registry.build` for a class that may host slots: their sections become Mechanisms (`slots`, when
    the sites are resolved already)."""
    if slots is None:
        slots = {name: found.mechanism for name, found in slot_sites(kind, section).items()}
    fields = set(registry.slot_fields(registry.get(kind, section["name"])))
    plain = {k: v for k, v in section.items() if k not in fields}
    with named_as(kind, plain):
        return registry.build(kind, plain, **structural, **slots)


@contextmanager
def named_as(section: str, keys: Iterable[str]) -> Iterator[None]:
    """A constructor's ValueError that opens with one of its section's keys (`conv must be ...`) names the
    key as the config does (`lm.conv must be ...`)."""
    try:
        yield
    except ValueError as error:
        said = str(error)
        first = re.match(r"\w+", said)
        if first is not None and first[0] in keys:
            raise ValueError(f"{section}.{said}") from None
        raise


@dataclass(frozen=True)
class Sizes:
    """What a model's sizes take from its task's data rather than from config: the source vocabulary's,
    the target vocabulary's (a decoder's) and the number of classes (a classifier head's)."""

    src_vocab: int
    tgt_vocab: int | None = None
    num_classes: int | None = None


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
    """A model of `model_type` from config sections, for Python callers: a `Seq2Seq` ("seq2seq", needs
    decoder and tgt_vocab), a `Classifier` ("classification", needs num_classes) or a `CausalLM` ("lm",
    needs lm), or a registered model type's own; on `sites` when config validation has resolved them from
    these sections, else on the sites resolved here."""
    sections = {
        "attention": attention,
        "score": score,
        "encoder": encoder,
        "decoder": decoder,
        "classifier": classifier,
        "lm": lm,
    }
    if sites is None:
        sites = resolve_sites(model_type, sections)
    sizes = Sizes(src_vocab, tgt_vocab, num_classes)
    model: nn.Module = registry.model_type(model_type).piece("model")(sections, sites, sizes)
    return model


def lm_model(sections: Mapping[str, Any], sites: Sites, sizes: Sizes) -> nn.Module:
    """A `CausalLM` of the `lm` section, each block's self-attention its site's: the run's mechanism, or
    its plan's entry (`lm.layers`)."""
    if sections.get("lm") is None:
        raise ValueError("an lm model needs an lm section")
    lm = {k: v for k, v in sections["lm"].items() if k != "layers"}  # the plan is in the sites
    planned = [found.mechanism for found in sites.planned()]
    with named_as("lm", lm):
        return CausalLM(sizes.src_vocab, planned or sites.attention.mechanism, **lm)


def classifier_model(sections: Mapping[str, Any], sites: Sites, sizes: Sizes) -> nn.Module:
    """A `Classifier`: the encoder, the run's mechanism pooling its states, the `classifier` head."""
    classifier = sections.get("classifier") or {}
    unknown = sorted(set(classifier) - set(CLASSIFIER_KEYS))
    if unknown:
        raise ValueError(
            f"unknown classifier key(s) {', '.join(unknown)}; allowed: {', '.join(CLASSIFIER_KEYS)}"
        )
    if sizes.num_classes is None:
        raise ValueError("a classification model needs num_classes")
    enc = _encoder(sections, sites, sizes)
    pooling = sites.attention.mechanism(enc.output_dim, enc.output_dim, enc.output_dim)
    return Classifier(enc, pooling, sizes.num_classes, **classifier)


def seq2seq_model(sections: Mapping[str, Any], sites: Sites, sizes: Sizes) -> nn.Module:
    """A `Seq2Seq`: the encoder and the decoder, whose cross-attention is the run's mechanism."""
    if sizes.tgt_vocab is None or sections.get("decoder") is None:
        raise ValueError("a seq2seq model needs tgt_vocab")
    enc = _encoder(sections, sites, sizes)
    dec = build_host(
        "decoder",
        sections["decoder"],
        sites.mechanisms("decoder"),
        vocab_size=sizes.tgt_vocab,
        enc_dim=enc.output_dim,
        cross_attention=sites.attention.mechanism,
    )
    return Seq2Seq(enc, dec)


def _encoder(sections: Mapping[str, Any], sites: Sites, sizes: Sizes) -> Any:
    return build_host("encoder", sections["encoder"], sites.mechanisms("encoder"), vocab_size=sizes.src_vocab)


def model_from_spec(spec: ModelSpec, sites: Sites) -> nn.Module:
    """The model `spec` describes, on its `sites` (validation's, or `Sites.of(spec)`), its embedding
    tables drawn from the spec's `embedding_seed` when it has one."""
    sizes = Sizes(
        len(spec.src_itos),
        len(spec.tgt_itos) if spec.tgt_itos else None,
        len(spec.classes) if spec.classes else None,
    )
    model: nn.Module = spec.declared.piece("model")(spec.sections(), sites, sizes)
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
