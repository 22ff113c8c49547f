"""A run shorter than one epoch (`trainer.max_steps` under an epoch: how people smoke-test a config) never
validates while it trains; it must still complete, with test metrics (issue 29: every such run failed in
`callbacks.stop_at`'s EarlyStopping). tests/e2e/install/test_readme_commands.py runs every README line
this way."""

from __future__ import annotations

from hydra.utils import instantiate
from lightning.pytorch.callbacks import EarlyStopping

from attnx import registry
from attnx.config.compose import compose


def test_stop_at_is_no_callback_without_a_threshold_and_checks_after_each_validation() -> None:
    registry.load_all()
    assert instantiate(compose([]).callbacks.stop_at) is None
    stop = instantiate(compose(["callbacks.stop_at.stopping_threshold=0.5"]).callbacks.stop_at)
    assert isinstance(stop, EarlyStopping) and stop.stopping_threshold == 0.5
    assert stop._check_on_train_epoch_end is False  # on_validation_end: never before a validation ran
