"""An lm's per-layer plan (`lm.layers`, attnx.models.plan): each block its entry's mechanism, the pattern
repeated; every layer checked and typed, its errors naming the layer and the key; decoding, state and a
saved spec per layer."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from attnx import registry
from attnx.models.assembly import build_model
from attnx.models.lm import CausalLM
from attnx.models.plan import plan_of
from attnx.models.sites import resolve_sites
from attnx.models.spec import ModelSpec

VOCAB, D, T = 20, 8, 9
WINDOW = {"name": "sliding_window", "num_heads": 2, "window": 3}
LINEAR = {"name": "linear", "num_heads": 2}


@pytest.fixture(autouse=True)
def plugins() -> None:
    registry.load_all()  # the shipped plugins (attnx.contrib) register through their entry points


def planned(layers: list[Any], num_layers: int = 2, score: dict[str, Any] | None = None) -> CausalLM:
    torch.manual_seed(0)
    lm = {"d_model": D, "num_layers": num_layers, "ff_dim": 16, "max_len": 32, "layers": layers}
    model = build_model("lm", VOCAB, None, {"name": "multi_head"}, score, None, lm=lm)
    assert isinstance(model, CausalLM)
    return model.double().eval()


def mechanisms(model: CausalLM) -> list[str]:
    return [type(block.attention.mechanism).__name__ for block in model.blocks]  # type: ignore[union-attr]


def test_each_block_gets_its_entry_and_a_shorter_plan_repeats_as_a_pattern() -> None:
    assert mechanisms(planned([WINDOW, LINEAR])) == ["SlidingWindowAttention", "LinearAttention"]
    repeated = ["SlidingWindowAttention", "LinearAttention"] * 2
    assert mechanisms(planned([WINDOW, LINEAR], num_layers=4)) == repeated
    assert mechanisms(planned([LINEAR], num_layers=3)) == ["LinearAttention"] * 3
    window = planned([WINDOW, LINEAR]).blocks[0].attention.mechanism  # type: ignore[union-attr]
    assert window.window == 3  # the entry's own hyperparameters


def test_an_entry_is_completed_with_its_defaults_and_its_registered_name() -> None:
    (done,) = plan_of({"num_layers": 2, "layers": [{"name": "luong"}]}) or []
    assert done == {"name": "dot", "input_feeding": True}  # luong is dot's alias; results record names
    (scored,) = plan_of({"num_layers": 1, "layers": [{"name": "multi_head", "score": "cosine"}]}) or []
    assert scored["score"] == {"name": "cosine", "temperature": 0.1, "learn_temperature": False}


@pytest.mark.parametrize(
    ("layers", "expected"),
    [
        ([LINEAR, {"name": "linearr"}], "lm.layers.1.name: unknown attention 'linearr'; did you mean"),
        ([LINEAR, {**WINDOW, "windw": 3}], "lm.layers.1.windw: attention sliding_window takes no such key"),
        ([{**WINDOW, "window": "abc"}], "lm.layers.0.window: Value 'abc' of type 'str' could not be"),
        ([LINEAR, {"name": "dot", "score": {"name": "dot", "x": 1}}], "lm.layers.1.score.x: score dot"),
        ([LINEAR] * 3, "lm.layers has 3 entries, more than lm.num_layers=2"),
        ([], "lm.layers=[]: must be a non-empty list"),
        ([{"window": 3}], "lm.layers.0={'window': 3}: must be a section with a name, e.g. {name:linear}"),
        (
            [{"name": "dot", "score": 3}],
            "lm.layers.0.score=3: must be a section with a name, e.g. {name:dot}",
        ),
    ],
)
def test_bad_entries_are_one_line_naming_the_layer_and_the_key(layers: list[Any], expected: str) -> None:
    with pytest.raises(ValueError) as error:
        plan_of({"num_layers": 2, "layers": layers})
    assert str(error.value).startswith(expected) and "\n" not in str(error.value)


def test_a_pattern_whose_length_does_not_divide_num_layers_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^lm.layers has 2 entries, not a divisor of lm.num_layers=3: "):
        plan_of({"num_layers": 3, "layers": [WINDOW, LINEAR]})


def sections(layers: list[Any], score: dict[str, Any] | None = None) -> dict[str, Any]:
    lm = {"num_layers": 2, "layers": plan_of({"num_layers": 2, "layers": layers})}
    return {"attention": {"name": "multi_head"}, "score": score, "lm": lm}


def test_sites_check_each_entry_for_its_role_naming_the_layer() -> None:
    with pytest.raises(ValueError, match=r"^lm.layers.1.name=local_window: \w+ cannot be a causal self-att"):
        resolve_sites("lm", sections([LINEAR, {"name": "local_window"}]))
    with pytest.raises(ValueError, match=r"^lm.layers.0.name=linear uses no score function; remove lm.laye"):
        resolve_sites("lm", sections([{**LINEAR, "score": "dot"}]))
    with pytest.raises(ValueError, match=r"^score=dot: an lm with lm.layers takes each layer's score from"):
        resolve_sites("lm", sections([LINEAR], score={"name": "dot"}))


def test_a_plans_sites_are_keyed_by_entry_and_named_as_a_label() -> None:
    sites = resolve_sites("lm", sections([WINDOW, LINEAR]))
    assert list(sites) == ["lm.layers.0", "lm.layers.1"]
    assert [s.attention for s in sites.layers(4)] == ["sliding_window", "linear"] * 2
    assert sites.chosen() == ("sliding_window+linear", None)  # each keeps its mechanism's own score
    scored = resolve_sites("lm", sections([{**WINDOW, "score": "cosine"}, LINEAR]))
    assert scored.chosen() == ("sliding_window+linear", "cosine+none")
    plain = resolve_sites("lm", {"attention": LINEAR, "score": None, "lm": {"num_layers": 2}})
    assert list(plain) == ["attention"] and plain.chosen() == ("linear", None)


def test_cached_decoding_of_a_plan_equals_the_full_forward_pass() -> None:
    model, tokens = planned([WINDOW, LINEAR], num_layers=4), torch.randint(4, VOCAB, (2, T))
    full, _ = model(tokens, torch.tensor([T, T]))
    logits, state = model.prefill(tokens[:, :4])
    steps = [logits]
    for t in range(4, T):
        step, state = model.step(tokens[:, t], state)
        steps.append(step[:, None])
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-10)


def test_a_plans_decoding_state_sums_its_layers() -> None:
    def one(section: dict[str, Any]) -> CausalLM:
        return planned([section], num_layers=1)

    n = 7
    together = planned([WINDOW, LINEAR]).state_size(n)
    assert together == one(WINDOW).state_size(n) + one(LINEAR).state_size(n)  # type: ignore[operator]
    assert one(WINDOW).state_size(n) != one(LINEAR).state_size(n)  # so the sum tells the layers apart


def test_a_saved_plan_is_upgraded_layer_by_layer() -> None:
    lm = {"d_model": D, "num_layers": 2, "layers": [{"name": "luong"}, {**LINEAR, "gone": 1}]}
    saved = {
        "version": 1,
        "model_type": "lm",
        "task": {"name": "mqar"},
        "attention": {"name": "multi_head"},
        "score": None,
        "optim": {},
        "decode": {},
        "src_itos": ["<pad>"],
        "lm": lm,
    }
    with pytest.raises(registry.StaleArguments, match="attention 'linear' no longer takes gone=1"):
        ModelSpec.from_dict(saved)
    dropped: list[str] = []
    spec = ModelSpec.from_dict(saved, dropped)
    assert spec.lm is not None and spec.lm["layers"] == [{"name": "dot"}, LINEAR]  # the alias, renamed
    assert dropped == ["attention 'linear' gone=1"]
