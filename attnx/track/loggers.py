"""Experiment loggers: the TensorBoard and W&B logger factories and what every run does with its loggers
at start and end.

TensorBoard names a run by its folder's path under `--logdir`, so a run of a sweep writes its event
file into `<run>/<what distinguishes it>/` (`0/attention=dot`), one event file per run, and ends by
logging its choices and overrides with its final metrics to the HParams plugin.

W&B never stops a run for lack of a network: it logs offline unless the user is logged in (or asks
otherwise), and an online run that cannot reach the server falls back to offline. A run keeps its W&B
run id in its folder, so `resume=auto` continues the same W&B run. Offline runs sit in
`<run folder>/wandb/offline-run-*` and are uploaded later with `attnx sync` (`wandb sync`).
"""

from __future__ import annotations

import logging
import netrc
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch.loggers import Logger, TensorBoardLogger, WandbLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only

log = logging.getLogger("attnx")
WANDB_HOST = "https://api.wandb.ai"
RUN_ID_FILE = "attnx-run-id"  # in <run>/wandb/: the W&B run id that resume=auto continues
NAME_MAX = 255  # bytes in one path component on Linux, macOS and Windows file systems


def wandb_logged_in() -> bool:
    """Whether W&B has credentials: WANDB_API_KEY, or a netrc entry for its host (what `wandb login` writes).

    Read locally, without asking the server, so a machine with no network gets its answer at once."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", WANDB_HOST)).hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host or "") is not None
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


def run_name() -> str | None:
    """In a multirun, the overrides that distinguish this run from the others of its sweep
    (`attention=dot,task.max_len=8`: `hydra.job.override_dirname`, which `track.sweep.RunNames` limits to
    the swept keys); None for a single run or a sweep that varies nothing."""
    if not HydraConfig.initialized():
        return None
    hydra = HydraConfig.get()
    return (hydra.job.override_dirname or None) if hydra.mode == RunMode.MULTIRUN else None


def folder_name(name: str) -> str:
    """`name` as a relative folder path whose parts fit a file system's limit: a long part (many swept
    keys) is cut, which loses no uniqueness, since every run of a sweep writes in its own folder."""
    return "/".join(part.encode()[:NAME_MAX].decode(errors="ignore") for part in name.split("/"))


class RunTensorBoardLogger(TensorBoardLogger):
    """Lightning's TensorBoardLogger with one event file per run. Lightning finalizes its loggers after
    `fit`, `validate` and `test` alike, and a closed SummaryWriter opens a new event file at its next
    write: here `finalize` only flushes (and saves hparams.yaml), and `close` ends the file when the
    run ends (`finish_logging`)."""

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if status == "success":
            self.save()  # flushes; writes hparams.yaml the first time
        elif self._experiment is not None:
            self._experiment.flush()

    @rank_zero_only
    def close(self, status: str) -> None:
        super().finalize(status)


def tensorboard_logger(save_dir: str, name: str | None = None, **kwargs: Any) -> TensorBoardLogger:
    """A TensorBoard logger writing into `<save_dir>/<name>`; `kwargs` go to Lightning's TensorBoardLogger.

    `name` defaults to the run's overrides that differ within its sweep (`run_name`), so that
    `tensorboard --logdir <sweep>` lists run 0 as `0/attention=dot`; a single run writes `tensorboard/`."""
    name = folder_name(name or run_name() or "tensorboard")
    return RunTensorBoardLogger(save_dir, name=name, version="", default_hp_metric=False, **kwargs)


def run_id_file(save_dir: str) -> Path:
    return Path(save_dir) / "wandb" / RUN_ID_FILE


def kept_run_id(save_dir: str) -> str | None:
    """The W&B run id that the run folder `save_dir` kept when its W&B run started (`keep_run_id`)."""
    path = run_id_file(save_dir)
    return path.read_text().strip() if path.is_file() else None


def keep_run_id(save_dir: str, run_id: str) -> None:
    path = run_id_file(save_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(run_id + "\n")


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
    save_dir: str,
    project: str = "attnx",
    offline: bool | None = None,
    group: str | None = None,
    name: str | None = None,
    id: str | None = None,
    resume: str | None = None,
    init_timeout: float = 30.0,
    **kwargs: Any,
) -> WandbLogger:
    """A WandbLogger with attnx's defaults; `kwargs` go to WandbLogger and on to `wandb.init`.

    `group` defaults to the sweep folder in a multirun; an empty `name` (a run with no overrides)
    lets W&B pick one. With `resume` auto, `id` defaults to the W&B run id the run folder kept, and
    Lightning's logger (`resume="allow"`) continues that W&B run; otherwise W&B makes a new one."""
    import wandb

    return OfflineFallbackWandbLogger(
        save_dir=save_dir,
        project=project,
        mode=wandb_mode(offline),
        group=group or sweep_group(),
        name=name or None,
        id=id or (kept_run_id(save_dir) if resume == "auto" else None),
        settings=wandb.Settings(init_timeout=init_timeout),
        **kwargs,
    )


def start_logging(loggers: Iterable[Logger], config: dict[str, Any], tags: Iterable[str | None]) -> None:
    """Give every logger the resolved config (W&B run config, TensorBoard and CSV hparams.yaml); tag
    W&B runs, so a dashboard filters by task/encoder/attention/score, and keep their id in the run
    folder for `resume=auto`."""
    for logger in loggers:
        logger.log_hyperparams(config)
        if isinstance(logger, WandbLogger):
            run = logger.experiment
            run.tags = tuple(dict.fromkeys([*run.tags, *(t for t in tags if t)]))
            if logger.save_dir:
                keep_run_id(logger.save_dir, run.id)


def hparams(record: dict[str, Any]) -> dict[str, Any]:
    """What TensorBoard's HParams table compares runs by: the run's choices by registered name
    (`attention=bahdanau` is additive; "–" where a choice is unused, as in `attnx report`), and the
    value of every key its overrides set, typed by Hydra's parser (`optim.lr=1e-3` is a number).

    TensorBoard takes the table's columns from the first run's record, so every run records the same
    keys; in a sweep, only the overrides that distinguish its runs (those `hydra.job.override_dirname`
    keeps), since the HParams tab shows its first five columns until more are ticked."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    excluded = HydraConfig.get().job.config.override_dirname.exclude_keys if HydraConfig.initialized() else []
    parsed = OverridesParser.create().parse_overrides(record["overrides"])
    kept = (o for o in parsed if not o.is_delete() and o.key_or_group not in excluded)
    chosen = {o.key_or_group: o.value() for o in kept}
    return {**chosen, **{k: "–" if v is None else v for k, v in record["choices"].items()}}


def final_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """The metrics, test before validation: the HParams tab shows its first five metric columns."""
    return dict(sorted(metrics.items(), key=lambda item: not item[0].startswith("test/")))


def finish_logging(loggers: Iterable[Logger], record: dict[str, Any]) -> None:
    """End the run's logging. A completed run's hyperparameters and final metrics go to TensorBoard's
    HParams plugin (at its last step, where the test metrics are). Its event file is closed. The W&B
    run is closed, marked failed or finished, so the next run of a sweep in this process starts its
    own run instead of being merged into this one (Lightning's logger never calls wandb.finish)."""
    completed = record["status"] == "completed"
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger) and completed:
            logger.log_hyperparams(hparams(record), final_metrics(record["metrics"]), step=record["steps"])
        if isinstance(logger, RunTensorBoardLogger):
            logger.close("success" if completed else "failed")
    if any(isinstance(logger, WandbLogger) for logger in loggers):
        import wandb

        wandb.finish(exit_code=0 if completed else 1)
