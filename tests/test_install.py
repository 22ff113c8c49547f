"""The configs ship inside the package: a non-editable install works from any folder, and finds a
user's own configs in `./conf` and ATTNX_CONFIG_PATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
MINE = """# @package _global_
defaults:
  - override /attention: dot
task:
  max_len: 7
"""


@pytest.mark.e2e
def test_non_editable_install_finds_its_configs(tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
         str(target), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = "import sys, attnx.cli; print(attnx.cli.__file__); sys.exit(attnx.cli.main(sys.argv[1:]))"

    def cfg_job(cwd: Path, *overrides: str, **extra_env: str) -> str:
        return subprocess.run(
            [sys.executable, "-c", code, "train", *overrides, "--cfg", "job"],
            cwd=cwd, env={**env, **extra_env}, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip

    out = cfg_job(Path("/"), "task=sort", "attention=multi_head")
    assert out.splitlines()[0].startswith(str(target))  # the installed copy, not the checkout
    assert "name: sort" in out and "name: multi_head" in out and "num_heads: 4" in out

    # A user's experiment in ./conf/experiment, and in a folder on ATTNX_CONFIG_PATH
    project = tmp_path / "project"
    (project / "conf" / "experiment").mkdir(parents=True)
    (project / "conf" / "experiment" / "mine.yaml").write_text(MINE)
    out = cfg_job(project, "experiment=mine")
    assert "name: dot" in out and "max_len: 7" in out
    out = cfg_job(Path("/"), "experiment=mine", ATTNX_CONFIG_PATH=str(project / "conf"))
    assert "name: dot" in out and "max_len: 7" in out


def test_every_config_folder_ships_with_the_package() -> None:
    """setuptools ships only listed packages; each folder of conf/ must be one (pyproject.toml)."""
    packages = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {p.parent for p in (ROOT / "conf").rglob("*.yaml")}
    expected = {".".join(["attnx", *f.relative_to(ROOT).parts]) for f in folders}
    assert expected <= packages, f"add to pyproject.toml's packages: {sorted(expected - packages)}"


@pytest.mark.e2e
def test_help_lists_subcommands_without_heavy_imports() -> None:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "attnx.cli", "--help"], capture_output=True, text=True
    )
    for command in ("train", "predict", "report", "dashboard", "sync", "bench", "plugins"):
        assert command in out.stdout
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert not {"torch", "lightning", "hydra"} & imported
