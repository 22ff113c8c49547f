"""Assembling a run's objects from a composed config: the task, the LightningModule (from the config's
`ModelSpec`, on the attention sites that validation checked) and the Trainer with attnx's callbacks,
loggers and checkpoint I/O. What a run does with them is `attnx.train.run`'s."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from attnx import registry
from attnx.config.compose import ConfigError, plain
from attnx.config.validation import check_convergence, check_lengths, check_monitors, validate
from attnx.models.spec import PARTS, SECTIONS, ModelSpec, check_model_type
from attnx.track.signals import Signals
from attnx.train import distributed


def assemble(cfg: DictConfig, signals: Signals | None = None) -> tuple[Any, Any, Any]:
    """(task, LightningModule, Trainer) for a composed config, seeded; the task's data is built. The
    module's model is built on the attention sites validation checked (`module.sites`). With `signals`,
    SIGTERM/SIGINT stop the Trainer at a batch end and save last.ckpt."""
    import torch

    from attnx.lit import checkpoints

    sites = validate(cfg)
    if cfg.ckpt_path is not None:
        try:
            checkpoints.load(cfg.ckpt_path)
        except checkpoints.CheckpointError as error:
            raise ConfigError(f"ckpt_path={cfg.ckpt_path}: {error.reason}") from None
    torch.set_num_threads(cfg.threads)
    # Lightning's DDP launch sets cpu_count / processes threads unless OMP_NUM_THREADS says otherwise
    os.environ["OMP_NUM_THREADS"] = str(cfg.threads)

    import lightning.pytorch as pl
    from hydra.errors import InstantiationException
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from attnx.lit import lit_module

    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    task = registry.build("task", cfg.task)
    task.setup()
    check_lengths(cfg, task)
    module = lit_module(model_spec(cfg, task), sites)
    check_monitors(cfg, module.logged_metrics(), cfg.task.name)
    judged = check_convergence(cfg, module.logged_metrics(), task.model_type, cfg.task.name)
    try:
        trainer = _trainer(cfg, signals, judged)
    except (InstantiationException, MisconfigurationException) as error:  # what validate cannot see
        raise ConfigError(f"trainer: {error.__cause__ or error}") from None
    distributed.check_nodes(trainer)  # the cluster environment is the Trainer's: known once it exists
    return task, module, trainer


def model_spec(cfg: DictConfig, task: Any) -> ModelSpec:
    """What rebuilds the model without the data (stored in checkpoints): the config sections of a
    composed config that the task's model type is made of, and the built task's vocabularies."""
    parts = PARTS[check_model_type(task.model_type)]
    return ModelSpec(
        model_type=task.model_type,
        task=plain(cfg.task),
        attention=plain(cfg.attention),
        score=plain(cfg.get("score")),
        optim=plain(cfg.optim),
        decode=plain(cfg.decode),
        compile=cfg.compile,
        embedding_seed=cfg.seed if cfg.paired_embeddings else None,
        src_itos=task.src_vocab.itos,
        tgt_itos=task.tgt_vocab.itos if "decoder" in parts else None,
        classes=list(task.classes) if "classifier" in parts else None,
        **{part: plain(cfg[part]) if part in parts else None for part in SECTIONS},
    )


def _trainer(cfg: DictConfig, signals: Signals | None, judged: str) -> Any:
    """The Trainer: the configured callbacks and loggers, plus attnx's checkpoint I/O (atomic writes,
    checksums, safe loading), interruption handling and the validation curve, its verdict judged on the
    metric `judged` (and the stop on it, with `convergence.stop`)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate
    from lightning.pytorch.callbacks import RichProgressBar
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    from attnx.lit.checkpoints import LastValidation, VerifiedCheckpointIO
    from attnx.lit.convergence import Convergence
    from attnx.lit.interrupt import SaveOnInterrupt
    from attnx.lit.resume import ExactResume

    callbacks = []
    for name, node in (cfg.get("callbacks") or {}).items():
        try:
            callback = None if node is None else instantiate(node)
        except InstantiationException as error:  # a value its type allows but the callback refuses
            raise ConfigError(f"callbacks.{name}: {error.__cause__ or error}") from None
        if callback is not None:  # a factory may return None for "none" (stop_at without a threshold)
            callbacks.append(callback)
    callbacks.append(ExactResume())  # a resumed run goes on as the interrupted one would have
    callbacks.append(LastValidation())  # spares validating the best checkpoint again (run._validate)
    # every run records its curve, whatever `callbacks` the config lists: not a callbacks entry
    callbacks.append(Convergence(**{**plain(cfg.convergence), "metric": judged}))
    if signals is not None:
        callbacks.append(SaveOnInterrupt(signals, checkpoint_dir(cfg)))
    plugins: list[Any] = [VerifiedCheckpointIO()]
    if SLURMEnvironment.detect():  # submitit owns SLURM's requeue signal, not Lightning (signals.py)
        plugins.append(SLURMEnvironment(auto_requeue=False))
    loggers = [instantiate(lg) for lg in (cfg.get("logger") or {}).values() if lg is not None]
    progress = cfg.trainer.enable_progress_bar
    if progress is None:
        progress = sys.stdout.isatty() and not os.environ.get("CI")
    if progress:
        callbacks.append(RichProgressBar())
    return instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=loggers or False,
        enable_progress_bar=progress,
        plugins=plugins,
        # the task's batch sampler gives each DDP rank its share (attnx.lit.datamodule): Lightning's
        # DistributedSampler around it would shard whole batches, repeating some to even out the ranks
        use_distributed_sampler=False,
    )


def checkpoint_dir(cfg: DictConfig) -> Path:
    """The run's checkpoint folder: the ModelCheckpoint callback's, `<run>/checkpoints` by default."""
    configured = OmegaConf.select(cfg, "callbacks.model_checkpoint.dirpath", default=None)
    return Path(configured or Path(cfg.paths.output_dir) / "checkpoints")
