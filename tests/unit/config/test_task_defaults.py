"""Per-task defaults (`conf/task_defaults/<task>.yaml`, `optional task_defaults: ${task}` in train.yaml's
defaults list): they apply to their task only, the command line and an experiment still win, and a
plugin task may ship its own in `./conf/task_defaults/`."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from attnx import registry
from attnx.config import validation
from attnx.config.compose import CONF_DIR, compose

FOLDER = Path(CONF_DIR) / "task_defaults"


SHIPPED = sorted(p.stem for p in FOLDER.glob("*.yaml"))


SHIPPED_ENCODER = sorted(p.stem for p in (FOLDER / "encoder").glob("*.yaml"))  # TASK_ENCODER


# what a task's defaults may set; each is compared whole between tasks without a file
SECTIONS = ("trainer", "callbacks", "classifier", "lm", "optim", "encoder", "decoder", "decode")


def _compose(*overrides: str, hydra: bool = True):
    registry.load_all()
    return compose(list(overrides), return_hydra_config=hydra)


def _leaves(node: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out |= _leaves(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def _values(path: Path) -> dict[str, object]:
    return _leaves(OmegaConf.to_container(OmegaConf.load(path)))


def _task_and_encoder(stem: str) -> tuple[str, str]:
    registry.load_all()
    for encoder in registry.available("encoder"):
        if stem.endswith(f"_{encoder}") and stem[: -len(encoder) - 1] in registry.available("task"):
            return stem[: -len(encoder) - 1], encoder
    raise AssertionError(f"task_defaults/encoder/{stem}.yaml: no registered TASK_ENCODER has this name")


def test_shipped_files_are_named_by_registered_tasks() -> None:
    """`optional` skips a file silently when no task has its name: a misspelt file would never apply."""
    registry.load_all()
    assert SHIPPED, "conf/task_defaults/ is empty"
    assert set(SHIPPED) <= set(registry.available("task"))
    for stem in SHIPPED_ENCODER:
        _task_and_encoder(stem)


@pytest.mark.parametrize("task", SHIPPED)
def test_a_tasks_defaults_apply_to_it_and_validate(task: str) -> None:
    cfg = _compose(f"task={task}", hydra=False)
    for key, value in _values(FOLDER / f"{task}.yaml").items():
        assert OmegaConf.select(cfg, key) == value, key
    validation.validate(cfg)  # trainer.* against Lightning's Trainer, bounds, dropout in [0, 1)


@pytest.mark.parametrize("stem", SHIPPED_ENCODER)
def test_a_tasks_encoder_defaults_apply_to_that_encoder_only(stem: str) -> None:
    task, encoder = _task_and_encoder(stem)
    cfg = _compose(f"task={task}", f"encoder={encoder}", hydra=False)
    expected = {**_values(FOLDER / f"{task}.yaml"), **_values(FOLDER / "encoder" / f"{stem}.yaml")}
    for key, value in expected.items():
        assert OmegaConf.select(cfg, key) == value, key
    validation.validate(cfg)
    for other in set(registry.available("encoder")) - {encoder}:  # keys of rnn's only must not reach another
        if f"{task}_{other}" not in SHIPPED_ENCODER:
            mine = _compose(f"task={task}", f"encoder={other}", hydra=False)
            assert mine.encoder == _compose("task=reverse", f"encoder={other}", hydra=False).encoder
            validation.validate(mine)


def test_sentiment_movies_checkpoints_by_validation_accuracy() -> None:
    checkpoint = _compose("task=sentiment_movies").callbacks.model_checkpoint
    assert (checkpoint.monitor, checkpoint.mode) == ("val/acc", "max")  # ClassifierModule logs val/acc


@pytest.mark.slow  # every registered task composed
def test_tasks_without_a_file_are_unaffected() -> None:
    registry.load_all()
    plain = [t for t in registry.available("task") if t not in SHIPPED]
    reference = OmegaConf.masked_copy(_compose("task=reverse"), list(SECTIONS))
    for task in plain:
        assert OmegaConf.masked_copy(_compose(f"task={task}"), list(SECTIONS)) == reference, task
    assert reference.callbacks.model_checkpoint.monitor == "val/loss"


def test_the_command_line_wins_over_a_tasks_defaults() -> None:
    cfg = _compose(
        "task=sentiment_movies", "callbacks.model_checkpoint.monitor=val/loss", "trainer.max_epochs=2"
    )
    assert cfg.callbacks.model_checkpoint.monitor == "val/loss" and cfg.trainer.max_epochs == 2
    assert cfg.callbacks.model_checkpoint.mode == "max"  # what the command line left is the task's


def test_an_experiment_wins_and_its_task_gets_its_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An experiment that switches the task gets that task's defaults (Hydra resolves `${task}` once the
    whole defaults tree is known), and its own values win over them."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "movies_by_loss.yaml").write_text(
        "# @package _global_\n"
        "defaults:\n  - override /task: sentiment_movies\n"
        "callbacks:\n  model_checkpoint:\n    monitor: val/loss\n"
    )
    monkeypatch.setenv("ATTNX_CONFIG_PATH", str(tmp_path))
    cfg = _compose("experiment=movies_by_loss")
    assert cfg.task.name == "sentiment_movies"
    checkpoint = cfg.callbacks.model_checkpoint
    assert (checkpoint.monitor, checkpoint.mode) == ("val/loss", "max")  # the experiment's, the task's
    for key, value in _values(FOLDER / "sentiment_movies.yaml").items():
        if key != "callbacks.model_checkpoint.monitor":
            assert OmegaConf.select(cfg, key) == value, key
