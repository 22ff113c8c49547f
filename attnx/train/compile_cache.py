"""Where compiled regions (attnx.nn.fusion) keep Inductor's on-disk cache: one folder per sweep.

Inductor caches the code it generates for a graph on disk, keyed by the graph, so a run whose regions
have the shapes and weights' layout of an earlier run's loads that code instead of generating it: it
pays seconds, not the minute of a first compile. `CompileCache`, a Hydra callback (conf/hydra/default.yaml),
points the cache at `compile_cache` before each job, in the process that runs it (a joblib worker, a
SLURM job): by default `<sweep dir>/compile_cache` in a multirun, so the runs of a sweep share it
wherever they run and the first run of a configuration alone compiles; `attnx compare` gives both its
phases `<out>/compile_cache`. A single run keeps Inductor's own default (per user, in the temp folder).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from attnx.track.results import unwritable

VARIABLE = "TORCHINDUCTOR_CACHE_DIR"  # read by Inductor whenever it looks for its cache


def cache_folder(config: DictConfig) -> Path | None:
    """The job's cache folder: `compile_cache`, else the sweep's in a multirun, else None (Inductor's)."""
    if config.get("compile_cache"):
        return Path(config.compile_cache)
    if config.hydra.mode == RunMode.MULTIRUN:
        return Path(config.hydra.sweep.dir) / "compile_cache"
    return None


class CompileCache(Callback):
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        folder = cache_folder(config)
        # an unusable folder would fail torch's import (torch._dynamo makes the cache folder then):
        # left to config validation, which names the key
        if folder is None or os.environ.get(VARIABLE) == str(folder.resolve()) or unwritable(folder):
            return
        os.environ[VARIABLE] = str(folder.resolve())
        if "torch._inductor.utils" in sys.modules:  # a worker's earlier job looked elsewhere
            sys.modules["torch._inductor.utils"].clear_caches()
