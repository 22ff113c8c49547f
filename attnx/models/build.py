"""Assemble a model from the config sections `encoder`, `attention`, `score` and `model`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from torch import nn

from attnx import registry
from attnx.models.classifier import Classifier
from attnx.models.seq2seq import Seq2Seq
from attnx.nn.attention import ScoreFactory
from attnx.nn.decoders import RNNDecoder
from attnx.nn.scores import Score
from attnx.schema import ModelConfig

MODEL_TYPES = ("seq2seq", "classification")
# The `model` keys: the schema's (attnx/schema.py), which a composed config has already passed; a call
# from Python is checked against the same list. A classifier reads only `dropout`.
MODEL_KEYS = tuple(f.name for f in dataclasses.fields(ModelConfig))


def resolve_score_name(attention_name: str, score_cfg: Mapping[str, Any] | None) -> str | None:
    """The score a run really uses: the user's, else the mechanism's default. The one place of the
    rule that a mechanism whose `default_score` is None takes no score."""
    default = registry.get("attention", attention_name).default_score
    if score_cfg is None:
        return default
    if default is None:
        raise ValueError(
            f"attention={attention_name} uses no score function; remove score={score_cfg['name']}"
        )
    return registry.registry("score").canonical(score_cfg["name"])


def score_factory(score_cfg: Mapping[str, Any]) -> ScoreFactory:
    """(query_dim, key_dim) -> Score with the config's hyperparameters; a mechanism may call it per head."""

    def make(query_dim: int, key_dim: int) -> Score:
        return registry.build("score", score_cfg, query_dim=query_dim, key_dim=key_dim)

    return make


def build_model(
    model_type: str,
    src_vocab: int,
    encoder: Mapping[str, Any],
    attention: Mapping[str, Any],
    score: Mapping[str, Any] | None,
    model: Mapping[str, Any],
    tgt_vocab: int | None = None,
    num_classes: int | None = None,
) -> nn.Module:
    """A `Seq2Seq` (model_type "seq2seq", needs tgt_vocab) or a `Classifier` ("classification",
    needs num_classes)."""
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {', '.join(MODEL_TYPES)}; got {model_type!r}")
    unknown = sorted(set(model) - set(MODEL_KEYS))
    if unknown:
        raise ValueError(f"unknown model key(s) {', '.join(unknown)}; allowed: {', '.join(MODEL_KEYS)}")

    enc = registry.build("encoder", encoder, vocab_size=src_vocab)
    score_name = resolve_score_name(attention["name"], score)
    factory = None if score_name is None else score_factory(score or {"name": score_name})

    if model_type == "classification":
        if num_classes is None:
            raise ValueError("a classification model needs num_classes")
        dims = {"query_dim": enc.output_dim, "key_dim": enc.output_dim, "value_dim": enc.output_dim}
        pooling = registry.build("attention", attention, **dims, score=factory)
        return Classifier(enc, pooling, num_classes, **{k: v for k, v in model.items() if k == "dropout"})

    if tgt_vocab is None:
        raise ValueError("a seq2seq model needs tgt_vocab")
    options = dict(model)
    hidden_dim = options.pop("hidden_dim", 128)
    embed_dim = options.pop("embed_dim", 64)
    # Scored mechanisms attend in the decoder's space (see RNNDecoder); none/fixed_c read C as is.
    placement = registry.get("attention", attention["name"]).placement
    memory_dim = hidden_dim if placement in ("before", "after") else enc.output_dim
    dims = {"query_dim": hidden_dim, "key_dim": memory_dim, "value_dim": memory_dim}
    mechanism = registry.build("attention", attention, **dims, score=factory)
    decoder = RNNDecoder(tgt_vocab, embed_dim, hidden_dim, enc.output_dim, mechanism, **options)
    return Seq2Seq(enc, decoder)
