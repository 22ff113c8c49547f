"""Compiled regions (attnx.nn.fusion): a region that cannot compile runs eager and says so once;
`compile` decides when a run compiles, and only rnn parts have regions. That the regions Inductor compiles
train as eager code does, and equal torch's kernels, is tests/e2e/train/test_fusion_compiled.py's."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

from attnx import registry
from attnx.config.compose import ConfigError, compose
from attnx.config.validation import validate
from attnx.lit.module import AUTO_MIN_STEPS, compiles
from attnx.nn.classic import BahdanauAttention
from attnx.nn.fusion import compile_regions, is_compiled, regions_of

from helpers.regions import ENCODER, REGION, batch, decoder
from helpers.runs import assembled
from helpers.tiny import TINY_LM, TINY_MODEL, TINY_RNN, TINY_SELF_ATTN, TINY_TRANSFORMER


class BranchingAttention(BahdanauAttention):
    """Bahdanau's attention with a branch on a value: correct, but Dynamo cannot trace it whole."""

    def attend(self, query: torch.Tensor, prepared: Any, need_weights: bool = True) -> Any:
        context, weights = super().attend(query, prepared, need_weights)
        if context.abs().max().item() > 1e6:  # a data-dependent branch: a graph break
            context = context.clamp(-1e6, 1e6)
        return context, weights


def test_a_region_that_cannot_compile_runs_eager_and_says_why_once(caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(1)
    dec = decoder("additive", {}, "gru", attention=BranchingAttention).eval()
    enc, tgt_in = batch([2, 6, 4], 7)
    expected, _ = dec(enc, tgt_in, need_weights=False)
    compile_regions(dec)
    dec.train()  # no dropout: the outputs compare with the eval pass
    with caplog.at_level(logging.WARNING, logger="attnx"):
        first, _ = dec(enc, tgt_in, need_weights=False)
        second, _ = dec(enc, tgt_in, need_weights=False)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith(f"compile: {REGION} runs eager: attend at test_fusion.py:")
    assert "\n" not in lines[0] and len(lines[0]) < 400
    assert not is_compiled(dec._recurrence)
    assert regions_of(dec)[REGION].record()["compiled"] is False
    torch.testing.assert_close(first, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(second, expected, rtol=1e-5, atol=1e-6)


def test_compile_policy_decides_by_the_runs_length() -> None:
    assert compiles(True, lambda: 1) and not compiles(False, lambda: 10**9)
    assert compiles("auto", lambda: AUTO_MIN_STEPS) and not compiles("auto", lambda: AUTO_MIN_STEPS - 1)
    assert compiles("auto", lambda: float("inf"))  # max_epochs=-1


@pytest.mark.parametrize("value", ["maybe", "1", "0"])
def test_compile_takes_true_false_or_auto(value: str) -> None:
    registry.load_all()
    with pytest.raises(ConfigError, match="compile must be true, false or auto"):
        validate(compose([f"compile={value}", "paths.output_dir=unused"]))


KINDS = {
    "seq2seq rnn": (["task=reverse", *TINY_MODEL], {ENCODER, REGION}),
    "seq2seq transformer": (["task=reverse", *TINY_SELF_ATTN, *TINY_TRANSFORMER], set()),
    "classification": (["task=sentiment", *TINY_SELF_ATTN], set()),
    "classification rnn": (["task=sentiment", *TINY_RNN], {ENCODER}),
    "lm": (TINY_LM, set()),
}


@pytest.mark.parametrize("kind", KINDS)
def test_fit_compiles_the_regions_a_model_has(kind: str) -> None:
    """`setup("fit")` wraps the fusable methods (compiled at their first call); other stages never do,
    and checkpoints keep their keys. Only the rnn encoder and decoder have regions today: every other
    part runs eager under `compile: true` (README)."""
    overrides, regions = KINDS[kind]
    registry.load_all()
    _, module, _ = assembled([*overrides, "compile=true", "paths.output_dir=unused"])
    keys = list(module.state_dict())
    module.setup("validate")
    assert regions_of(module.model) == {}
    module.setup("fit")
    assert set(regions_of(module.model)) == regions
    assert list(module.state_dict()) == keys
    assert (module.compile_record() is None) == (not regions)
