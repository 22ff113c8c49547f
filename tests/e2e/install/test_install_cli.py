"""The configs and the shipped plugins are part of the package: a non-editable install works from any
folder, finds a user's own configs in `./conf` and ATTNX_CONFIG_PATH, and has every plugin the README
uses (attnx/contrib, registered by attnx's own entry points)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import REPO as ROOT
from helpers.tiny import NO_HEATMAPS, ONE_EPOCH, TINY_LM, sizes

MINE = """# @package _global_
defaults:
  - override /attention: dot
task:
  max_len: 7
"""


# What a wheel is built from. A copy, because setuptools builds in the source folder's build/, which keeps
# the files of modules since renamed or removed and ships them.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "attnx", "conf", "hydra_plugins")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A non-editable install of the checkout into a folder of its own (its dependencies are this venv's);
    a process with it first on PYTHONPATH imports it, and reads its metadata (entry points), not the
    checkout's."""
    source, target = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("site")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
         str(target), str(source)],
        check=True, capture_output=True,
    )  # fmt: skip
    return target


def test_non_editable_install_finds_its_configs(installed: Path, tmp_path: Path) -> None:
    target = installed
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


def test_non_editable_install_has_the_shipped_plugins_in_any_folder(installed: Path, tmp_path: Path) -> None:
    """The README's `attention=linear` from a user's own project folder, with the installed `attnx`
    script; neither the checkout nor a ./plugins folder is anywhere in sight."""
    shipped = {p.relative_to(installed) for p in (installed / "attnx").rglob("*.py")}
    missing = {p.relative_to(ROOT) for p in (ROOT / "attnx").rglob("*.py")} - shipped
    assert not missing, f"add their packages to pyproject.toml's packages: {sorted(map(str, missing))}"
    env = {**os.environ, "PYTHONPATH": str(installed), "ATTNX_PLUGIN_PATH": "", "OMP_NUM_THREADS": "1"}
    project = tmp_path / "project"
    project.mkdir()

    def attnx(*args: str) -> subprocess.CompletedProcess:
        command = [str(installed / "bin" / "attnx"), *args]
        return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300)

    listing = attnx("plugins")
    assert listing.returncode == 0, listing.stderr
    for name in ("linear", "sliding_window", "local_window", "gaussian", "alibi", "t5_bias", "rope"):
        assert f"| {name} " in listing.stdout and f"dist attnx (attnx.contrib.{name})" in listing.stdout
    for overrides, expected in (
        (["experiment=zoology_mqar", "attention=sliding_window"], "name: sliding_window"),
        (["experiment=positions", "positions=alibi"], "name: alibi"),
    ):
        job = attnx("train", *overrides, "--cfg", "job")
        assert job.returncode == 0 and expected in job.stdout, job.stderr
    run = project / "run"
    trained = attnx(
        "train", *TINY_LM, "attention=linear", *sizes(train=32), *ONE_EPOCH, "trainer.max_steps=2",
        *NO_HEATMAPS, f"hydra.run.dir={run}",
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    record = json.loads((run / "results.json").read_text())
    assert record["status"] == "completed" and record["choices"]["attention"] == "linear"
    unknown = attnx("train", "task=mqar", "attention=lineer")
    [line] = unknown.stderr.splitlines()
    assert unknown.returncode == 2 and line.startswith(
        "attnx train: unknown attention 'lineer'; did you mean 'linear'?"
    )
    assert {"linear", "local_window", "sliding_window"} <= set(line.split("available: ")[1].split(", "))


def test_help_lists_subcommands_without_heavy_imports() -> None:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "attnx.cli", "--help"], capture_output=True, text=True
    )
    for command in ("train", "predict", "report", "dashboard", "sync", "bench", "plugins"):
        assert command in out.stdout
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    assert not {"torch", "lightning", "hydra"} & imported
