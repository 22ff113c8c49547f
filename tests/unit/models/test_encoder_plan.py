"""A self-attention encoder's per-layer plan (`encoder.layers`, the slot's `plan` field): each block its
entry's mechanism, the pattern repeated; sites keyed by the config key; a saved plan upgraded entry by
entry; the field is a list, never a hyperparameter or a config group."""

from __future__ import annotations

import pytest
import torch

from attnx import registry
from attnx.models.assembly import build_model
from attnx.models.sites import resolve_sites
from attnx.models.spec import ModelSpec
from attnx.nn.attention import Mechanism
from attnx.nn.encoders import SelfAttentionEncoder

WINDOW = {"name": "local_window", "window": 1, "predict_centre": True}
HEADS = {"name": "multi_head", "num_heads": 2, "dropout": 0.0}


@pytest.fixture(autouse=True)
def plugins() -> None:
    registry.load_all()


def encoder(layers: list[dict] | None, num_layers: int = 4) -> dict:
    return {"name": "self_attn", "d_model": 8, "num_layers": num_layers, "ff_dim": 16, "layers": layers}


def classifier(layers: list[dict] | None, num_layers: int = 4) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(
        "classification", 30, encoder(layers, num_layers), {"name": "additive"}, None, {}, num_classes=2
    )


def test_each_block_gets_its_entry_repeated_as_a_pattern() -> None:
    model = classifier([HEADS, WINDOW])
    kinds = [type(block.attention.mechanism).__name__ for block in model.encoder.blocks]
    assert kinds == ["MultiHeadAttention", "LocalAttention"] * 2
    assert model.encoder.blocks[1].attention.mechanism.window == 1
    logits, *_ = model(torch.randint(4, 30, (3, 7)), torch.tensor([7, 5, 2]))
    assert logits.shape == (3, 2) and torch.isfinite(logits).all()


def test_a_plans_sites_are_keyed_by_its_config_key_and_replace_the_slots_own() -> None:
    sections = {"encoder": encoder([HEADS, WINDOW]), "attention": {"name": "additive"}, "score": None}
    sites = resolve_sites("classification", sections)
    assert list(sites) == ["encoder.layers.0", "encoder.layers.1", "attention"]
    assert [sites.slot_layer("encoder", i).attention for i in range(4)] == ["multi_head", "local_window"] * 2
    mechanisms = sites.mechanisms("encoder")
    assert list(mechanisms) == ["layers"] and [m.cls.__name__ for m in mechanisms["layers"]] == [
        "MultiHeadAttention",
        "LocalAttention",
    ]
    plain = resolve_sites("classification", {**sections, "encoder": encoder(None)})
    assert list(plain.mechanisms("encoder")) == ["attention"]  # without a plan: the slot's one mechanism


def test_a_pattern_that_does_not_divide_the_layers_is_refused_by_the_encoder_too() -> None:
    one = Mechanism(registry.get("attention", "multi_head"))
    with pytest.raises(ValueError, match="layers has 3 mechanisms for num_layers=4"):
        SelfAttentionEncoder(30, d_model=8, num_layers=4, layers=[one, one, one])


def test_the_plan_field_is_a_slot_field_not_a_hyperparameter_or_a_group() -> None:
    entry = registry.registry("encoder").entry("self_attn")
    assert "layers" not in entry.hyperparams()
    assert "layers" in registry.slot_fields(entry.cls)
    assert "encoder/layers" not in registry.slot_groups()


def test_a_saved_encoder_plan_is_upgraded_entry_by_entry() -> None:
    saved = {**encoder([{"name": "luong"}, {**WINDOW, "gone": 2}]), "attention": HEADS, "score": None}
    with pytest.raises(registry.StaleArguments, match="attention 'local_window' no longer takes gone=2"):
        registry.upgrade("encoder", saved)
    dropped: list[str] = []
    upgraded = registry.upgrade("encoder", saved, dropped)
    assert upgraded["layers"] == [{"name": "dot"}, WINDOW]  # the alias, renamed; the stale key dropped
    assert dropped == ["attention 'local_window' gone=2"]
    spec = ModelSpec.from_dict(
        {
            "version": 1,
            "model_type": "classification",
            "task": {"name": "sentiment"},
            "encoder": {**encoder([HEADS, WINDOW]), "attention": HEADS, "score": None},
            "attention": {"name": "additive"},
            "score": None,
            "classifier": {},
            "optim": {},
            "decode": {},
            "src_itos": ["<pad>"],
        }
    )
    assert spec.encoder is not None and spec.encoder["layers"] == [HEADS, WINDOW]
