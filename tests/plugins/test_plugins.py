"""Plugins end to end: discovery from ATTNX_PLUGIN_PATH and entry points via the real `attnx plugins`
CLI, import errors naming the file, and the plugins shipped in attnx.contrib passing the kit."""

import pytest
import torch

from attnx.registry import get, load_all
from attnx.testing import CHECKS, check_attention, check_score

from helpers.plugins import listing

# it declares no causal, position_free, and ships no reference
LOCAL_WINDOW_LACKS = ("causality", "permutation", "cached_decoding", "state", "reference")


@pytest.mark.slow  # the whole kit over every shipped example plugin
def test_shipped_example_plugins_pass_the_kit() -> None:
    load_all()
    gaussian, local = get("score", "gaussian"), get("attention", "local_window")
    check_score(gaussian)
    check_score(gaussian, bandwidth=0.5, learn_bandwidth=True)
    for score in ("dot", "general", "gaussian"):
        assert check_attention(local, score) == [c for c in CHECKS if c not in LOCAL_WINDOW_LACKS]
    # local-m centres query i at (i + ½)·L/Tq − ½: in self-attention Tq is the padded length, so a longer
    # padding moves every real query's window, and a query alone (a decoding step) is centred in the
    # middle, wherever it sat among the queries it was trained with. The plugin is left as it is (the
    # rnn decoder calls it one query at a time); the kit says so.
    local_m = {"window": 1, "predict_centre": False}
    assert check_attention(local, checks=[c for c in CHECKS if c not in ("padding", "queries")], **local_m)
    with pytest.raises(
        AssertionError,
        match=r"^padding \([^)]*\): attention LocalAttention \(self-attention, T=5; initial parameters",
    ):
        check_attention(local, checks=("padding",), **local_m)
    with pytest.raises(
        AssertionError, match=r"^queries \([^)]*\): attention LocalAttention .*query 0 alone gets another"
    ):
        check_attention(local, checks=("queries",), **local_m)

    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    g = gaussian(4, 4, bandwidth=0.5)
    torch.testing.assert_close(g(q, g.prepare(k)), -torch.cdist(q, k).pow(2) / (2 * 0.5**2))


def test_listing_shows_what_each_class_declares() -> None:
    load_all()
    tables = listing()
    assert list(tables) == ["score", "attention", "encoder", "decoder", "task"]
    header, attention = tables["attention"]
    assert header[2] == "capabilities"
    assert attention["multi_head"][2] == (
        "self_attention cross_attention causal takes_positions position_free incremental"
    )
    assert attention["local_window"][2] == "self_attention cross_attention"
    assert attention["none"][2] == "cross_attention position_free"
    header, scores = tables["score"]
    assert header[2] == "uses_positions" and scores["dot"][2] == "False"
    header, encoders = tables["encoder"]
    assert header[2] == "slots"
    assert encoders["self_attn"][2] == "attention (role self, default multi_head, per layer: layers)"
    assert encoders["rnn"][2] == ""
    assert tables["decoder"][1]["transformer"][2] == "attention (role causal, default multi_head)"
    assert tables["task"][0] == ["name", "origin", "hyperparameters"]


def test_local_window_weights_stay_in_the_window() -> None:
    load_all()
    att = get("attention", "local_window")(4, 4, 4, window=1, predict_centre=False)
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    states = torch.randn(2, 6, 4)
    _, weights = att(states, states, states, mask)  # self-attention: centre p_i = i for the full row
    i, j = torch.arange(6)[:, None], torch.arange(6)
    assert (weights[0][(i - j).abs() > 1] == 0).all() and (weights[0][(i - j).abs() <= 1] > 0).all()
    # the short row's 6 queries map onto its 3 keys: every row keeps at least one key
    assert torch.allclose(weights[1].sum(-1), torch.ones(6)) and (weights[1][:, 3:] == 0).all()
    predicted = get("attention", "local_window")(4, 4, 4, window=1)
    _, weights = predicted(states[:, :1], states, states, mask)
    assert ((weights > 0).sum(-1) <= 3).all()
