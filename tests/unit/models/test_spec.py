"""`ModelSpec`: a checkpoint's model spec is versioned plain data that round-trips, and an older layout
(the unversioned dict before ModelSpec, version 0) is upgraded in `ModelSpec.from_dict`."""

from __future__ import annotations

import io

import pytest
import torch

from attnx import registry
from attnx.models.spec import VERSION, ModelSpec
from attnx.train.assemble import model_spec

from helpers.runs import resolved
from helpers.tiny import TINY_RNN

SIZES = ["task.train_size=16", "task.val_size=8", "task.test_size=8"]
TASKS = {"seq2seq": "task=reverse", "classification": "task=sentiment", "lm": "task=mqar"}


def spec_of(model_type: str) -> ModelSpec:
    run = resolved([TASKS[model_type], *TINY_RNN, *SIZES])
    task = registry.build("task", run["task"])
    task.setup()
    return model_spec(run.model_type, run.sections, task)


def through_a_checkpoint(data: dict) -> dict:
    """`data` saved and read back as in a checkpoint: `torch.load(weights_only=True)` takes plain data."""
    buffer = io.BytesIO()
    torch.save({"attnx_spec": data}, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)["attnx_spec"]


@pytest.mark.parametrize("model_type", TASKS)
def test_a_spec_round_trips_through_a_checkpoint(model_type: str) -> None:
    spec = spec_of(model_type)
    assert spec.model_type == model_type
    saved = through_a_checkpoint(spec.to_dict())
    assert saved["version"] == VERSION
    assert ModelSpec.from_dict(saved) == spec
    # a model type's missing parts are None, the others' sections are there
    assert [part for part in ("encoder", "decoder", "classifier", "lm") if saved[part] is not None] == list(
        spec.parts
    )


def test_an_unversioned_spec_is_upgraded() -> None:
    """Version 0: no `version`, the classifier head's section under `model`, saved for every model type."""
    spec = spec_of("classification")
    old = spec.to_dict()
    del old["version"]
    old["model"] = old.pop("classifier")
    assert ModelSpec.from_dict(old) == spec

    seq2seq = spec_of("seq2seq")
    old = seq2seq.to_dict()
    del old["version"], old["classifier"]
    old["model"] = {"dropout": 0.1}
    assert ModelSpec.from_dict(old) == seq2seq
    # older still: the rnn decoder's sizes under `model`, before decoders were a registry kind
    old["model"] = {k: v for k, v in old.pop("decoder").items() if k != "name"}
    upgraded = ModelSpec.from_dict(old)
    assert upgraded.decoder == seq2seq.decoder and upgraded.classifier is None


def test_a_spec_newer_than_this_attnx_is_refused() -> None:
    saved = {**spec_of("lm").to_dict(), "version": VERSION + 1}
    with pytest.raises(ValueError, match=f"version {VERSION + 1}, newer than this attnx's"):
        ModelSpec.from_dict(saved)


def test_an_unknown_model_type_is_refused() -> None:
    saved = {**spec_of("lm").to_dict(), "model_type": "translation"}
    refused = "unknown model type 'translation'.*available: classification, lm, seq2seq"
    with pytest.raises(ValueError, match=refused):
        ModelSpec.from_dict(saved)
