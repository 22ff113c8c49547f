"""The attention sites a run's config validation checks are the ones its model is built on: resolved once,
handed down to model assembly, the results record and the heatmaps."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnx.models import sites as sites_module

from helpers.runs import assembled
from helpers.tiny import TINY_BUDGET, TINY_SELF_ATTN, TINY_TRANSFORMER

RUNS = {
    "seq2seq": ["task=reverse", *TINY_SELF_ATTN, *TINY_TRANSFORMER, "attention=multi_head", "score=general"],
    "classification": ["task=sentiment", *TINY_SELF_ATTN, "attention=dot"],
    "lm": ["task=mqar", "lm.d_model=16", "lm.max_len=64"],
}


@pytest.mark.parametrize("model_type", RUNS)
def test_each_site_is_resolved_once_and_the_model_is_built_on_it(
    model_type: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolved: list[tuple[str, str]] = []
    site = sites_module.site

    def counted(where: tuple[str, str], *args, **kwargs):  # every site's resolution, by its config keys
        resolved.append(where)
        return site(where, *args, **kwargs)

    monkeypatch.setattr(sites_module, "site", counted)
    _, module, _ = assembled([*RUNS[model_type], *TINY_BUDGET, f"paths.output_dir={tmp_path}"])
    assert len(resolved) == len(module.sites) == len(set(resolved)), resolved
    assert module.sites.model_type == module.spec.model_type == model_type
    # the model's mechanisms are the sites' classes, built with their scores
    run = module.sites.attention.mechanism
    built = [m for m in module.model.modules() if type(m) is run.cls]
    assert built, f"no {run.cls.__name__} in the model"
    if model_type == "seq2seq":
        assert module.sites.attention.score == "general"
        assert (
            module.sites.attention.describe("cross-attention") == "multi_head cross-attention (general score)"
        )
        assert set(module.sites) == {"encoder.attention", "attention", "decoder.attention"}
