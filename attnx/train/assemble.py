"""Assembling a run's objects from its resolved configuration (`attnx.config.resolved.ResolvedRun`): the
task, the LightningModule (from the run's `ModelSpec`, on the attention sites validation checked) and the
Trainer with attnx's callbacks, loggers and checkpoint I/O. What a run does with them is
`attnx.train.run`'s."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from attnx import registry
from attnx.config.compose import ConfigError
from attnx.config.resolved import ResolvedRun, thawed
from attnx.models.spec import SECTIONS, ModelSpec
from attnx.registry import ModelType
from attnx.tasks.shape import Shape, check_fit
from attnx.track.signals import Signals
from attnx.train import distributed


def assemble(run: ResolvedRun, cfg: DictConfig, signals: Signals | None = None) -> tuple[Any, Any, Any]:
    """(task, LightningModule, Trainer) for a validated run, seeded; the task's data is built. The module's
    model is built on the attention sites validation checked (`module.sites`). `cfg` is the composed
    config, whose Trainer, callbacks and loggers Hydra instantiates. With `signals`, SIGTERM/SIGINT stop
    the Trainer at a batch end and save last.ckpt."""
    import torch

    from attnx.lit import checkpoints

    preloaded = {}
    if run["ckpt_path"] is not None:  # verified now, and handed to Lightning's load: read once
        try:
            preloaded[str(run["ckpt_path"])] = checkpoints.load(run["ckpt_path"])
        except checkpoints.CheckpointError as error:
            raise ConfigError(f"ckpt_path={run['ckpt_path']}: {error.reason}") from None
    torch.set_num_threads(run["threads"])
    # Lightning's DDP launch sets cpu_count / processes threads unless OMP_NUM_THREADS says otherwise
    os.environ["OMP_NUM_THREADS"] = str(run["threads"])

    import lightning.pytorch as pl
    from hydra.errors import InstantiationException
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from attnx.lit import lit_module

    pl.seed_everything(run["seed"], workers=True, verbose=False)
    task = registry.build("task", run["task"])
    task.setup()
    if run.shape is None:  # lengths the task could not declare: its data tells
        check_fit(run.readers, Shape.of(task.splits), run["task"]["name"])
    module = lit_module(model_spec(run.model_type, run.sections, task), run.sites)
    try:
        trainer = _trainer(run, cfg, signals, preloaded)
    except (InstantiationException, MisconfigurationException) as error:  # what validate cannot see
        raise ConfigError(f"trainer: {error.__cause__ or error}") from None
    distributed.check_nodes(trainer)  # the cluster environment is the Trainer's: known once it exists
    return task, module, trainer


def model_spec(kind: ModelType, sections: Mapping[str, Any], task: Any) -> ModelSpec:
    """What rebuilds the model without the data (stored in checkpoints): the config sections the model
    type is made of, and the built task's vocabularies (the target's where its targets are sequences, the
    classes where they are labels)."""
    return ModelSpec(
        model_type=kind.name,
        task=thawed(sections["task"]),
        attention=thawed(sections["attention"]),
        score=thawed(sections.get("score")),
        optim=thawed(sections["optim"]),
        decode=thawed(sections["decode"]),
        compile=sections["compile"],
        embedding_seed=sections["seed"] if sections["paired_embeddings"] else None,
        src_itos=task.src_vocab.itos,
        tgt_itos=task.tgt_vocab.itos if kind.targets == "sequence" else None,
        classes=list(task.classes) if kind.targets == "label" else None,
        **{part: thawed(sections.get(part)) if part in kind.parts else None for part in SECTIONS},
    )


def _trainer(run: ResolvedRun, cfg: DictConfig, signals: Signals | None, preloaded: dict[str, Any]) -> Any:
    """The Trainer: the configured callbacks and loggers, plus attnx's checkpoint I/O (atomic writes,
    checksums, safe loading; `preloaded` checkpoints, verified already, are not read again), interruption
    handling and the validation curve, its verdict judged on the run's `judged` metric (and the stop on
    it, with `convergence.stop`)."""
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
    convergence, judged = run["convergence"], run.metrics[run.judged]
    callbacks.append(
        Convergence(
            run.judged,
            tolerance=convergence["tolerance"],
            ceiling=judged.ceiling if convergence["ceiling"] is None else convergence["ceiling"],
            higher_is_better=judged.higher_is_better,
            min_validations=convergence["min_validations"],
            stop=convergence["stop"],
            proportion=judged.proportion,
        )
    )
    if signals is not None:
        callbacks.append(SaveOnInterrupt(signals, checkpoint_dir(cfg)))
    plugins: list[Any] = [VerifiedCheckpointIO(preloaded)]
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
