"""The config tree and the registries agree: every registered name and every shipped experiment composes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from attnx import registry
from attnx.config.compose import CONF_DIR

EXPERIMENTS = sorted(p.stem for p in (Path(CONF_DIR) / "experiment").glob("*.yaml"))


def _compose(*overrides: str):
    registry.load_all()  # the registry's groups, whichever test runs first
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides), return_hydra_config=True)


@pytest.mark.slow  # every registered name composed: hundreds of compositions
@pytest.mark.parametrize("kind", registry.KINDS)
def test_every_registered_name_composes_with_its_signature_fields(kind: str) -> None:
    for name in registry.available(kind):
        cfg = _compose(f"{kind}={name}")
        node = OmegaConf.to_container(cfg[kind])
        assert node["name"] == name
        entry = registry.registry(kind).entry(name)
        assert set(node) - {"name"} == {*entry.hyperparams(), *registry.slot_fields(entry.cls)}


def test_mechanism_default_score_is_left_to_the_mechanism() -> None:
    assert _compose().get("score") is None
    assert _compose("score=general").score.name == "general"


@pytest.mark.slow  # every job of every shipped experiment composed
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_with_every_swept_value(name: str) -> None:
    cfg = _compose(f"experiment={name}")
    sweeper = cfg.hydra.sweeper
    if "plan" in sweeper:  # the plan sweeper's jobs, inline: each composes with every override it makes
        jobs = [list(job) for job in sweeper.plan]
    else:
        params = sweeper.params.items()
        jobs = [[f"{key}={v.strip()}"] for key, values in params for v in str(values).split(",")]
    assert jobs, f"experiment {name} sweeps nothing"
    for job in jobs:
        swept = _compose(f"experiment={name}", *job)
        for override in job:
            key, value = override.split("=", 1)
            if key in registry.KINDS:
                chosen = swept[key].name
            elif key in swept.hydra.runtime.choices:  # a config group of the experiment's, e.g. positions
                chosen = swept.hydra.runtime.choices[key]
            else:
                chosen = OmegaConf.select(swept, key)
            assert str(chosen) == value, (key, value)
