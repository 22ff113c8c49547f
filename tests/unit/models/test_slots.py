"""Every attention site is a plugin slot: every legal (site, mechanism, score) composes from the command
line's overrides and trains one step; every illegal one is refused with the reason."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from attnx import registry
from attnx.config.compose import CONF_DIR
from attnx.models.assembly import build_model
from attnx.vocab import BOS, EOS, PAD

VOCAB = 12
TINY = [
    "encoder=self_attn",
    "encoder.d_model=8",
    "encoder.num_layers=1",
    "encoder.ff_dim=8",
    "task=reverse",
    "decoder=transformer",
    "decoder.d_model=8",
    "decoder.num_layers=1",
    "decoder.ff_dim=8",
]
SECTIONS = ("task", "encoder", "decoder", "attention", "score", "classifier")
# site -> the override keys of its mechanism and score. The rnn decoder's cross-attention and classifier
# pooling, the 2015 sites, are covered with every built-in in test_models.py and test_train.py.
SITES = {
    "encoder self-attention": ("encoder/attention", "encoder/score"),
    "decoder causal self-attention": ("decoder/attention", "decoder/score"),
    "transformer cross-attention": ("attention", "score"),
}


@pytest.fixture(scope="module", autouse=True)
def hydra_conf():
    """One Hydra initialisation for the module's hundreds of compositions."""
    registry.load_all()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        yield


def combinations() -> list[tuple[str, str, str | None]]:
    registry.load_all()
    scores = registry.registry("score").names()
    found = []
    for site in SITES:
        for name in registry.registry("attention").names():
            takes_score = registry.get("attention", name).default_score is not None
            found += [(site, name, score) for score in ([None, *scores] if takes_score else [None])]
    return found


def composed(*overrides: str) -> dict:
    """The model's sections of `attnx train`'s config with the tiny sizes and `overrides`."""
    cfg = compose(config_name="train", overrides=[*TINY, *overrides])
    return {k: OmegaConf.to_container(cfg[k], resolve=True) if cfg[k] is not None else None for k in SECTIONS}


def compose_site(site: str, mechanism: str, score: str | None) -> dict:
    attention_key, score_key = SITES[site]
    return composed(f"{attention_key}={mechanism}", *([f"{score_key}={score}"] if score else []))


def build(cfg: dict) -> torch.nn.Module:
    return build_model(
        "seq2seq",
        VOCAB,
        cfg["encoder"],
        cfg["attention"],
        cfg["score"],
        cfg["classifier"],
        cfg["decoder"],
        VOCAB,
    )


def one_step(model: torch.nn.Module) -> torch.Tensor:
    """One AdamW step on a padded batch; the loss before it."""
    torch.manual_seed(0)
    lengths = torch.tensor([5, 3])
    src = torch.randint(4, VOCAB, (2, 5)).masked_fill(torch.arange(5) >= lengths[:, None], PAD)
    tgt = torch.cat([torch.full((2, 1), BOS), src.flip(1), torch.full((2, 1), EOS)], 1)
    logits, _ = model(src, lengths, tgt[:, :-1], need_weights=False)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


@pytest.mark.slow  # every site x mechanism x score: a composition each
@pytest.mark.parametrize(("site", "mechanism", "score"), combinations())
def test_every_site_hosts_every_mechanism_it_can(site: str, mechanism: str, score: str | None) -> None:
    cfg = compose_site(site, mechanism, score)
    try:
        model = build(cfg)
    except ValueError as error:
        cls = registry.get("attention", mechanism)
        uses_positions = score is not None and registry.get("score", score).uses_positions
        # the only refusals: a role the mechanism does not declare, or positions it cannot have or pass on
        assert (
            ("cannot be a self-attention layer" in str(error) and not cls.self_attention)
            or ("cannot be cross-attention" in str(error) and not cls.cross_attention)
            or ("cannot be a causal self-attention layer" in str(error) and not cls.causal)
            or ("uses positions" in str(error) and uses_positions)
        ), str(error)
        return
    before = [p.detach().clone() for p in model.parameters()]
    loss = one_step(model)
    assert torch.isfinite(loss)
    changed = sum(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert changed > len(before) // 2  # the step reached the model, not a corner of it


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["encoder/attention=fixed_c"],
            "encoder.attention=fixed_c: FixedContext cannot be a self-attention layer",
        ),
        (["decoder/attention=none"], "decoder.attention=none: NoAttention cannot be a causal self-attention"),
        (["decoder/attention=local_window"], "LocalAttention cannot be a causal .* declares causal = False"),
        (["attention=sliding_window"], "SlidingWindowAttention cannot be cross-attention: .* = False"),
        (
            ["encoder/attention=local_window", "encoder/score=alibi"],
            "encoder.score=alibi uses positions, and encoder.attention=local_window does not pass them on",
        ),
    ],
)
def test_a_mechanism_that_cannot_serve_its_site_is_refused_naming_it(
    overrides: list[str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build(composed(*overrides))
