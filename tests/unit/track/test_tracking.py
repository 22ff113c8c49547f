"""Tracking: W&B offline runs (no network here), TensorBoard event files, and attention heatmaps. A sweep's
dashboards (W&B's offline run files record by record, TensorBoard in a browser): test_dashboards.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnx.track.loggers import folder_name, wandb_mode


def test_wandb_mode_is_offline_without_credentials(
    no_wandb_account: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert wandb_mode(None) == "offline"
    assert wandb_mode(False) == "online"
    (tmp_path / "netrc").write_text("machine api.wandb.ai login user password " + "k" * 40 + "\n")
    assert wandb_mode(None) == "online"  # logged in with `wandb login`
    assert wandb_mode(True) == "offline"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode(None) == "disabled"


def test_a_tensorboard_folder_named_by_many_overrides_fits_the_file_system() -> None:
    name = ",".join(f"optim.param_{i}=0.000123456789" for i in range(12))  # an Optuna trial's, 300 bytes
    assert len(name) > 255 and folder_name(name) == name[:255]
    assert folder_name(f"encoder/attention=dot,{name}") == f"encoder/{f'attention=dot,{name}'[:255]}"
