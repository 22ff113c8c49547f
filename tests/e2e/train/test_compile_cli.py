"""`compile` end to end: a sweep's runs share Inductor's on-disk cache in `<sweep dir>/compile_cache`, so a
run of a configuration compiled before, in another process, compiles nothing new; `auto` leaves a short
run eager; results.json says which regions compiled and what compiling cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.tiny import TINY, TINY_RNN, results, train

COMPILED = [*TINY_RNN, *TINY, "attention=additive", "compile=true"]


@pytest.mark.engines  # Inductor compiles both regions cold, in a folder of its own
def test_a_sweeps_runs_share_the_compile_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the sweep's job runs in this process and points Inductor at its folder: restored afterwards
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "before"))
    sweep = tmp_path / "sweep"
    assert train(sweep, *COMPILED, "seed=0", sweep=True) == 0
    (first,) = results(sweep)
    cache = sweep / "compile_cache"
    assert first["status"] == "completed", first.get("error")
    assert first["compile"]["regions"] == {
        name: {"compiled": True, "graphs": 1} for name in ("RNNEncoder._recurrence", "RNNDecoder._recurrence")
    }
    assert first["compile"]["cache_misses"] > 0 and first["compile"]["seconds"] > 0
    assert any(cache.rglob("*")), "nothing cached in the sweep's folder"
    # a later run of the same configuration, another process, another seed, pointed at the same cache
    again = tmp_path / "again"
    env = {
        **os.environ,
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "elsewhere"),
    }  # overridden by compile_cache
    command = [sys.executable, "-m", "attnx.cli", "train", *COMPILED, "seed=1", f"compile_cache={cache}"]
    subprocess.run([*command, f"hydra.run.dir={again}"], check=True, env=env, capture_output=True)
    second = json.loads((again / "results.json").read_text())
    assert second["compile"]["cache_misses"] == 0, second["compile"]
    assert second["compile"]["cache_hits"] > 0


def test_auto_leaves_a_short_run_eager(tmp_path: Path) -> None:
    assert train(tmp_path, *TINY_RNN, *TINY, "attention=additive", "compile=auto") == 0
    (record,) = results(tmp_path)
    assert record["status"] == "completed" and record["compile"] is None
