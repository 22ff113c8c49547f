"""`attnx.config.session`: compositions inside one session share Hydra's repository cache per search path and
give exactly the configs they give alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra._internal import config_repository
from omegaconf import OmegaConf

from attnx.config.compose import CONF_DIR, ConfigError, compose
from attnx.config.session import active, session

pytestmark = pytest.mark.slow  # a Hydra composition each, seconds in all

# different tasks, model kinds, sites and mechanisms, a plugin's score, values and a renamed key
PAIRS = [
    ["task=reverse", "attention=dot", "score=general", "optim.lr=0.01"],
    ["task=mqar", "attention=local_window", "attention.window=4"],
    ["task=sentiment", "encoder=self_attn", "encoder/attention=multi_head", "seed=3"],
]


def yaml_of(overrides: list[str]) -> str:
    return OmegaConf.to_yaml(compose(overrides), resolve=False)


def test_a_session_composes_what_each_composition_gives_alone() -> None:
    alone = [yaml_of(o) for o in PAIRS]
    with session(CONF_DIR):
        assert active()
        shared = [yaml_of(o) for o in [*PAIRS, *PAIRS]]  # twice: the second time all from its cache
    assert not active()
    assert shared == [*alone, *alone]


def test_a_session_builds_one_repository_cache_per_search_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = []
    init = config_repository.CachingConfigRepository.__init__
    monkeypatch.setattr(
        config_repository.CachingConfigRepository,
        "__init__",
        lambda self, delegate: built.append(1) or init(self, delegate),
    )
    for overrides in PAIRS:
        compose(overrides)
    assert len(built) == len(PAIRS)  # alone: one each
    built.clear()
    mine = tmp_path / "mine" / "experiment"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text("# @package _global_\nseed: 41\n")
    with session(CONF_DIR):
        for overrides in PAIRS:
            compose(overrides)
        assert len(built) == 1
        # another search path (a user's config folder) gets a cache of its own, and finds its files
        monkeypatch.setenv("ATTNX_CONFIG_PATH", str(tmp_path / "mine"))
        assert compose(["experiment=mine"]).seed == 41
        monkeypatch.delenv("ATTNX_CONFIG_PATH")
        with pytest.raises(ConfigError, match="experiment"):
            compose(["experiment=mine"])  # the shipped path's cache never saw it
        assert len(built) == 2
