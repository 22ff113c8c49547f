"""Preflight composes a sweep's jobs once per set of config group choices (`train.preflight.Composed`): a
job that differs only in values gets, from a copy of the shared composition, exactly the config Hydra
composes for it alone."""

from __future__ import annotations

import hydra
import pytest
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from attnx import registry
from attnx.config.compose import CONF_DIR
from attnx.train.preflight import Composed

JOBS = [
    ["attention=dot", "seed=1"],
    ["attention=dot", "seed=2", "optim.lr=0.01", "task.max_len=12"],
    ["attention=dot", "+callbacks.model_checkpoint.every_n_epochs=2", "decoder.hidden_dim=32"],
    ["attention=multi_head", "seed=1", "attention.num_heads=2"],
    ["task=mqar", "attention=linear", "lm.d_model=32"],
    ["experiment=quickstart", "seed=3"],
    ["encoder=self_attn", "encoder/attention=local_window", "encoder.attention.window=4"],
]


def without_hydra(cfg: DictConfig) -> dict:
    found = OmegaConf.to_container(cfg)
    del found["hydra"]
    return found


@pytest.mark.slow  # composes every job of a sweep twice, through Hydra and through preflight
def test_a_job_of_shared_choices_gets_the_config_hydra_composes_for_it() -> None:
    registry.load_all()
    with hydra.initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        composed = Composed([], parser)
        for job in JOBS:
            alone = hydra.compose("train", job, return_hydra_config=True)
            shared = composed.job(job)
            # the hydra node's own record of the overrides and the run differs; its launcher and sweeper not
            assert without_hydra(shared) == without_hydra(alone), job
            for node in ("launcher", "sweeper"):
                assert shared.hydra[node] == alone.hydra[node]
    # the four attention/task choices above, and no more: values never compose anew
    assert len(composed.found) == 5


def test_a_value_hydra_refuses_alone_is_refused_from_the_shared_composition() -> None:
    registry.load_all()
    with hydra.initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        composed = Composed([], parser)
        composed.job(["seed=1"])
        with pytest.raises(Exception, match="Could not override 'task.nope'"):
            composed.job(["task.nope=1"])
        with pytest.raises(Exception, match="Could not append to config"):
            composed.job(["+seed=2"])
