"""The plan sweeper's config: `hydra/sweeper=plan`. A module of its own, imported by Hydra's plugin scan
before the sweeper, as Hydra's own plugins do; no `from __future__ import annotations`, which a
dataclass in a module the scan executes outside sys.modules cannot resolve."""

from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class PlanSweeperConf:
    _target_: str = "hydra_plugins.attnx_plan_sweeper.plan_sweeper.PlanSweeper"
    plan: Any = "???"  # a YAML (or JSON) file of a list of jobs, each a list of overrides; or that list
    max_batch_size: int | None = None  # jobs handed to the launcher at once (None: all)


ConfigStore.instance().store(group="hydra/sweeper", name="plan", node=PlanSweeperConf, provider="attnx")
