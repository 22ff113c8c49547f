"""A machine without a W&B account, for the tracking tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def no_wandb_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No API key, no netrc entry, no WANDB_MODE: what a fresh machine without `wandb login` has."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
