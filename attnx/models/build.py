"""Assemble a model from the config sections `encoder`, `decoder`, `lm`, `attention`, `score` and `model`.

Every attention site gets a `Mechanism` (class, score, hyperparameters) checked against the site: its
role (self, causal or cross: the mechanism's capability flags), whether the site has positions for a
score that uses them, and whether the mechanism passes them on. `sites` states these rules once, for
config validation (before any data is built) and for model assembly alike.
"""

from __future__ import annotations

import inspect
import zlib
from collections.abc import Mapping
from functools import partial
from typing import Any

import torch
from torch import nn

from attnx import registry
from attnx.models.classifier import Classifier
from attnx.models.lm import CausalLM
from attnx.models.seq2seq import Seq2Seq
from attnx.nn.attention import Mechanism
from attnx.nn.scores import ScoreFactory
from attnx.nn.transformer import refusal

MODEL_TYPES = ("seq2seq", "classification", "lm")
# The `model` keys: the classifier head's hyperparameters, which attnx/config/schema.py's ModelConfig types
# for a composed config; a call from Python is checked against the same list.
MODEL_KEYS = tuple(inspect.signature(Classifier).parameters)[3:]  # after encoder, attention, num_classes


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
    """The score class with the config's hyperparameters bound: (query_dim, key_dim) -> Score. A mechanism
    builds it through `build_score`, which also passes `num_heads` to a score that takes it."""
    params = {k: v for k, v in score_cfg.items() if k != "name"}
    return partial(registry.get("score", score_cfg["name"]), **params)


def mechanism(
    where: tuple[str, str],
    attention: Mapping[str, Any],
    score: Mapping[str, Any] | None,
    role: str,
    has_positions: bool,
) -> Mechanism:
    """The site's Mechanism, or a ValueError naming the config keys (`where`: the attention and score
    keys, e.g. ("encoder.attention", "encoder.score")) and the reason."""
    attention_key, score_key = where
    cls = registry.get("attention", attention["name"])
    why = refusal(cls, role)
    if why is not None:
        raise ValueError(f"{attention_key}={attention['name']}: {why}")
    try:
        score_name = resolve_score_name(attention["name"], score)
    except ValueError:
        raise ValueError(
            f"{attention_key}={attention['name']} uses no score function; remove {score_key}={score['name']}"
        ) from None
    if score_name is not None and registry.get("score", score_name).uses_positions:
        if not has_positions:
            raise ValueError(
                f"{score_key}={score_name} uses positions, and this site ({attention_key}) has none"
            )
        if not cls.takes_positions:
            raise ValueError(
                f"{score_key}={score_name} uses positions, and {attention_key}={attention['name']} does "
                "not pass them on (takes_positions = False)"
            )
    factory = None if score_name is None else score_factory(score or {"name": score_name})
    hyperparams = {k: v for k, v in attention.items() if k != "name"}
    return Mechanism(cls, factory, hyperparams)


def slot_mechanisms(kind: str, section: Mapping[str, Any]) -> dict[str, Mechanism]:
    """A Mechanism per slot of a registered class (`registry.Slot`), from its section's sub-sections."""
    mechanisms = {}
    for name, slot in registry.slots_of(registry.get(kind, section["name"])).items():
        attention = section.get(name) or {"name": slot.default}
        where = (f"{kind}.{name}", f"{kind}.{slot.score}")
        mechanisms[name] = mechanism(where, attention, section.get(slot.score), slot.role, has_positions=True)
    return mechanisms


def build_host(
    kind: str, section: Mapping[str, Any], slots: dict[str, Mechanism] | None = None, **structural: Any
) -> Any:
    """`registry.build` for a class that may host slots: their sections become Mechanisms (`slots`, when
    `sites` has made them already)."""
    slots = slot_mechanisms(kind, section) if slots is None else slots
    fields = set(registry.slot_fields(registry.get(kind, section["name"])))
    plain = {k: v for k, v in section.items() if k not in fields}
    return registry.build(kind, plain, **structural, **slots)


def sites(
    model_type: str,
    encoder: Mapping[str, Any],
    attention: Mapping[str, Any],
    score: Mapping[str, Any] | None,
    decoder: Mapping[str, Any] | None,
) -> dict[str, Mechanism]:
    """Every attention site of the model the sections describe, checked: the slots of the encoder and
    decoder, and the run's `attention` as the decoder's cross-attention, the classifier's pooling or an
    lm's causal self-attention (an lm has no encoder or decoder)."""
    if model_type == "lm":
        return {
            "attention": mechanism(("attention", "score"), attention, score, "causal", has_positions=True)
        }
    found = {f"encoder.{k}": m for k, m in slot_mechanisms("encoder", encoder).items()}
    if model_type == "classification":
        found["attention"] = mechanism(("attention", "score"), attention, score, "cross", has_positions=False)
        return found
    if decoder is None:
        raise ValueError("a seq2seq model needs a decoder section")
    has_positions = registry.get("decoder", decoder["name"]).cross_positions
    found["attention"] = mechanism(("attention", "score"), attention, score, "cross", has_positions)
    found |= {f"decoder.{k}": m for k, m in slot_mechanisms("decoder", decoder).items()}
    return found


def build_model(
    model_type: str,
    src_vocab: int,
    encoder: Mapping[str, Any] | None,
    attention: Mapping[str, Any],
    score: Mapping[str, Any] | None,
    model: Mapping[str, Any],
    decoder: Mapping[str, Any] | None = None,
    tgt_vocab: int | None = None,
    num_classes: int | None = None,
    lm: Mapping[str, Any] | None = None,
) -> nn.Module:
    """A `Seq2Seq` (model_type "seq2seq", needs decoder and tgt_vocab), a `Classifier`
    ("classification", needs num_classes) or a `CausalLM` ("lm", needs lm)."""
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type must be one of {', '.join(MODEL_TYPES)}; got {model_type!r}")
    unknown = sorted(set(model) - set(MODEL_KEYS))
    if unknown:
        raise ValueError(f"unknown model key(s) {', '.join(unknown)}; allowed: {', '.join(MODEL_KEYS)}")
    found = sites(model_type, encoder or {}, attention, score, decoder)
    cross = found["attention"]
    if model_type == "lm":
        if lm is None:
            raise ValueError("an lm model needs an lm section")
        return CausalLM(src_vocab, cross, **lm)

    def slots(kind: str) -> dict[str, Mechanism]:
        return {key.split(".", 1)[1]: m for key, m in found.items() if key.startswith(f"{kind}.")}

    enc = build_host("encoder", encoder, slots("encoder"), vocab_size=src_vocab)

    if model_type == "classification":
        if num_classes is None:
            raise ValueError("a classification model needs num_classes")
        pooling = cross(enc.output_dim, enc.output_dim, enc.output_dim)
        return Classifier(enc, pooling, num_classes, **model)

    if tgt_vocab is None:
        raise ValueError("a seq2seq model needs tgt_vocab")
    dec = build_host(
        "decoder",
        decoder,
        slots("decoder"),
        vocab_size=tgt_vocab,
        enc_dim=enc.output_dim,
        cross_attention=cross,
    )
    return Seq2Seq(enc, dec)


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
