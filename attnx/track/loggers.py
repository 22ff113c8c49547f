"""Experiment loggers: the W&B logger factory and what every run does with its loggers at start and end.

W&B never stops a run for lack of a network: it logs offline unless the user is logged in (or asks
otherwise), and an online run that cannot reach the server falls back to offline. Offline runs sit
in `<run folder>/wandb/offline-run-*` and are uploaded later with `wandb sync`.
"""

from __future__ import annotations

import logging
import netrc
import os
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlparse

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch.loggers import Logger, WandbLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment

log = logging.getLogger("attnx")
WANDB_HOST = "https://api.wandb.ai"


def wandb_logged_in() -> bool:
    """Whether W&B has credentials: WANDB_API_KEY, or a netrc entry for its host (what `wandb login` writes).

    Read locally, without asking the server, so a machine with no network gets its answer at once."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", WANDB_HOST)).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def wandb_mode(offline: bool | None) -> str:
    """`offline` true/false forces the mode; else WANDB_MODE if set; else online only when logged in.

    Always explicit: wandb 0.31 with no mode and no API key raises at init instead of logging."""
    if offline is not None:
        return "offline" if offline else "online"
    return os.environ.get("WANDB_MODE") or ("online" if wandb_logged_in() else "offline")


def sweep_group() -> str | None:
    """The sweep folder in a Hydra multirun (one W&B group per sweep), None for a single run."""
    if not HydraConfig.initialized():
        return None
    hydra = HydraConfig.get()
    return str(hydra.sweep.dir) if hydra.mode == RunMode.MULTIRUN else None


class OfflineFallbackWandbLogger(WandbLogger):
    """Lightning's WandbLogger, except that an online run whose server is unreachable logs offline."""

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        import wandb

        try:
            return super().experiment
        except wandb.errors.CommError as error:
            log.warning("W&B server unreachable (%s): logging offline; upload later with `wandb sync`", error)
            self._wandb_init["mode"] = "offline"
            return super().experiment


def wandb_logger(
    project: str = "attnx",
    offline: bool | None = None,
    group: str | None = None,
    name: str | None = None,
    init_timeout: float = 30.0,
    **kwargs: Any,
) -> WandbLogger:
    """A WandbLogger with attnx's defaults; `kwargs` go to WandbLogger and on to `wandb.init`.

    `group` defaults to the sweep folder in a multirun; an empty `name` (a run with no overrides)
    lets W&B pick one."""
    import wandb

    return OfflineFallbackWandbLogger(
        project=project,
        mode=wandb_mode(offline),
        group=group or sweep_group(),
        name=name or None,
        settings=wandb.Settings(init_timeout=init_timeout),
        **kwargs,
    )


def start_logging(loggers: Iterable[Logger], config: dict[str, Any], tags: Iterable[str | None]) -> None:
    """Give every logger the resolved config (W&B run config, TensorBoard hparams, CSV hparams.yaml);
    tag W&B runs, so a dashboard filters by task/encoder/attention/score."""
    for logger in loggers:
        logger.log_hyperparams(config)
        if isinstance(logger, WandbLogger):
            run = logger.experiment
            run.tags = tuple(dict.fromkeys([*run.tags, *(t for t in tags if t)]))


def finish_logging(loggers: Iterable[Logger], completed: bool) -> None:
    """Close the W&B run, marked failed or finished, so the next run of a sweep in this process starts
    its own run instead of being merged into this one (Lightning's logger never calls wandb.finish)."""
    if any(isinstance(logger, WandbLogger) for logger in loggers):
        import wandb

        wandb.finish(exit_code=0 if completed else 1)
