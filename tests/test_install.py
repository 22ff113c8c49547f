"""The configs ship inside the package: a non-editable install works from any folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_non_editable_install_finds_its_configs(tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
         str(target), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = "import sys, attnx.cli; print(attnx.cli.__file__); sys.exit(attnx.cli.main(sys.argv[1:]))"
    out = subprocess.run(
        [sys.executable, "-c", code, "train", "task=sort", "attention=multi_head", "--cfg", "job"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out.splitlines()[0].startswith(str(target))  # the installed copy, not the checkout
    assert "name: sort" in out and "name: multi_head" in out and "num_heads: 4" in out


def test_help_lists_subcommands_without_heavy_imports() -> None:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "attnx.cli", "--help"], capture_output=True, text=True
    )
    for command in ("train", "predict", "report", "bench", "plugins"):
        assert command in out.stdout
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert not {"torch", "lightning", "hydra"} & imported
