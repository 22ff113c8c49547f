"""A run's life: Hydra has composed the config; Lightning fits and tests; every run writes results.json.

A run holds its folder's lock (attnx.track.lock) from start to end, records `running` before it
trains, and ends `completed`, `failed` or `interrupted` (SIGTERM/SIGINT: a checkpoint is saved and
the exit code is 143/130). The objects it runs are assembled by `attnx.train.assemble`.

Plugins are discovered in `attnx.train.cli.main` before Hydra composes anything, and again by `train`
in every job: launchers that run jobs in other processes (joblib's loky workers, submitit) call the task
function there, so a plugin's classes are registered in the process that builds its model.

Under DDP every rank runs `train` (attnx.train.distributed); rank 0 alone takes the folder's lock and
writes its files, and `results.json` records `world_size`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import socket
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnx import registry
from attnx.config.compose import ConfigError, one_line, renamed_sections
from attnx.config.resolved import PLUMBING, ResolvedRun, thawed
from attnx.config.validation import validate
from attnx.track import sweep
from attnx.track.lock import RunFolderBusy, RunLock
from attnx.track.results import CHOICES, Record, completed, unwritable
from attnx.track.signals import Interrupted, Signals
from attnx.train import distributed
from attnx.train.assemble import assemble, checkpoint_dir
from attnx.train.identity import earlier, resumes_exactly, same_run

log = logging.getLogger("attnx")


class UserError(BaseException):
    """A single run's config error, raised out of the task function to `main`, which prints it as one
    line and exits 2. A BaseException, so Hydra's job runner passes it up instead of reporting it."""


class RunFailed(BaseException):
    """A single run that failed for a reason outside the code (a full disk, a non-finite loss): one
    line and exit 1 instead of a traceback. Its results.json says the same."""


def train(cfg: DictConfig) -> float | None:
    """Run one job; returns `cfg.optimized_metric` for sweepers. Never loses a sweep's other runs:
    in a multirun a failure is recorded in results.json and the sweep goes on."""
    registry.load_all()  # a launcher's worker process arrives here without having run `main`
    renamed_sections(cfg)  # a user's config file may still say `model:` for `classifier:`
    sweep.watch_parent()
    # Lightning logs through its own handler; propagating too would print every line twice.
    logging.getLogger("lightning.pytorch").propagate = False
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")  # Lightning 2.6 on torch 2.13, not ours
    # Lightning's advice to prefix the command with srun wherever srun exists: attnx reaches SLURM
    # through its launcher (hydra/launcher=slurm), and a login node's local run is meant to be local
    warnings.filterwarnings("ignore", message="The `srun` command is available on your system")
    # a run shorter than its first validation: `_checkpoint_to_evaluate` says what it evaluates instead
    warnings.filterwarnings("ignore", message=r"`ModelCheckpoint\(monitor=.*could not find the monitored key")
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    output_dir = Path(cfg.paths.output_dir)
    if distributed.rank() != 0:  # another rank of a DDP run: rank 0 holds the folder and writes its files
        with Signals() as signals:
            return _run(cfg, hc, output_dir, multirun, signals, lead=False)
    lock = RunLock(output_dir)
    try:
        lock.acquire()
    except RunFolderBusy as error:  # the holder's files are left alone: no record, no config written
        if multirun:
            log.error("%s", error)
            return math.nan
        raise UserError(str(error)) from None
    except OSError as error:  # no folder there (a file in its path, no permission): nothing can be recorded
        raise UserError(f"paths.output_dir={output_dir}: cannot write there ({error.strerror})") from None
    try:
        if lock.stale:
            log.warning(
                "took over %s's lock from pid %s (%s), which is no longer running",
                output_dir,
                lock.stale.get("pid"),
                lock.stale.get("host"),
            )
        _save_config(cfg, hc, output_dir)
        with Signals() as signals:
            sweep.running(True)
            return _stored_or_run(cfg, hc, output_dir, multirun, signals)
    finally:
        sweep.running(False)
        lock.release()


def _stored_or_run(cfg: DictConfig, hc: Any, output_dir: Path, multirun: bool, signals: Signals) -> Any:
    """With `store=` set, the stored run of this run's key instead of training it, or the run trained and
    then stored; a second process wanting the same key waits for the first (attnx.store.runs). A folder
    whose run completed with these overrides is resume=auto's to skip; one whose run completed with others
    (a continuation's longer budget) is looked up too."""
    from attnx.store.key import run_key
    from attnx.store.runs import Store, root_of

    root = root_of(cfg.get("store"))
    several = "ddp" in str(cfg.trainer.get("strategy")) or int(cfg.trainer.get("num_nodes") or 1) > 1
    if several and root is not None:  # every rank would have to take the stored run alike: they train
        log.warning("store=%s: a DDP run is neither looked up nor stored", cfg.store)
    overrides = list(hc.overrides.task)
    done = completed(output_dir)
    if root is None or several or (done is not None and same_run(done["overrides"], overrides)):
        return _run(cfg, hc, output_dir, multirun, signals, lead=True)
    why = unwritable(root)
    if why is not None:
        raise UserError(f"store={cfg.store}: cannot write to {root} ({why})")
    store, key = Store(root), run_key(cfg)
    with store.claim(key):
        record = store.fetch(key, output_dir, overrides)
        if record is not None:
            log.info("run store: %s is stored run %s (%s), not trained again", output_dir, key.hex[:12], root)
            if cfg.summary:
                _print_summary(record)
                print(f"  taken from the run store ({root}): trained in {record['stored']['from']}")
            return record["metrics"].get(cfg.optimized_metric)
        before = earlier(output_dir)
        result = _run(cfg, hc, output_dir, multirun, signals, lead=True)
        trained = completed(output_dir)
        if trained is not None and resumes_exactly(trained, before, cfg.trainer):
            store.put(key, output_dir)
        elif trained is not None:
            log.warning("run store: %s resumed a run of other overrides; not stored", output_dir)
        return result


def _run(
    cfg: DictConfig, hc: Any, output_dir: Path, multirun: bool, signals: Signals, lead: bool
) -> float | None:
    record = Record(
        lead,
        status="running",
        pid=os.getpid(),
        host=socket.gethostname(),
        started=time.strftime("%Y-%m-%d %H:%M:%S"),
        overrides=list(hc.overrides.task),
        # registered names, not aliases as typed: `attention=bahdanau` is recorded as additive
        choices={k: (cfg.get(k) or {}).get("name") for k in CHOICES},
        output_dir=str(output_dir),
        config=None,  # resolved by validation below: a bad interpolation is the user's error, recorded
    )
    done = completed(output_dir) if cfg.resume == "auto" else None
    if done and same_run(done["overrides"], record["overrides"]):
        log.info("resume=auto: %s already completed with these overrides, skipping", output_dir)
        return done["metrics"].get(cfg.optimized_metric)
    trainer = None
    try:
        record.write()
        try:
            run = validate(cfg)
            record.update(
                config=_config(run, cfg),
                choices=run.choices(),  # registered names; the score validation resolved; None: no such part
                model_type=run.model_type.name,
                metric_declarations={
                    name: {"higher_is_better": m.higher_is_better, "ceiling": m.ceiling}
                    for name, m in run.metrics.items()
                },
            )
            task, module, trainer = assemble(run, cfg, signals)
        except (ConfigError, ValueError, registry.RegistryError, OmegaConfBaseException) as error:
            if record["config"] is None:  # refused before it was resolved: the config as far as it resolves
                with contextlib.suppress(OmegaConfBaseException):
                    record["config"] = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
            return _fail(record, error, multirun, user_error=True)
        return _fit(cfg, task, module, trainer, record)
    except Interrupted as error:
        _interrupted(record, error.signum, trainer)
        raise
    except SystemExit as error:  # Lightning's SIGTERMException: its loops raise it at an epoch boundary
        if signals.received is None:
            raise
        _interrupted(record, signals.received, trainer)
        raise Interrupted(signals.received) from error
    except Exception as error:  # a crashed run is recorded, never silently lost
        return _fail(record, error, multirun, user_error=False)
    finally:
        if trainer is not None:
            from attnx.track.loggers import finish_logging

            finish_logging(trainer.loggers, record)


def _fit(cfg: DictConfig, task: Any, module: Any, trainer: Any, record: Record) -> Any:
    from attnx.lit.checkpoints import check_writable, newest_good, rebased
    from attnx.lit.datamodule import TaskDataModule
    from attnx.track.loggers import start_logging

    data = TaskDataModule(task, cfg.bucketing)
    folder = checkpoint_dir(cfg)
    check_writable(folder)
    ckpt_path = cfg.ckpt_path
    if ckpt_path is None and cfg.resume == "auto":
        ckpt_path, checkpoint, skipped = newest_good(folder)
        if checkpoint is not None:  # verified: Lightning's load takes it instead of reading it again
            rebased(checkpoint, folder)
            trainer.strategy.checkpoint_io.preloaded[str(ckpt_path)] = checkpoint
        if skipped:
            record["resume_skipped"] = skipped
            then = f"resuming from {ckpt_path}" if ckpt_path else "no good checkpoint left: starting afresh"
            log.warning("resume=auto: skipped %s; %s", "; ".join(skipped), then)
    record["resumed_from"] = str(ckpt_path) if ckpt_path else None
    record["world_size"] = trainer.world_size
    record.write()
    if record.lead:  # the loggers write on rank 0 only
        start_logging(trainer.loggers, record["config"], tags=record["choices"].values())
    metrics: dict[str, float] = {}
    with distributed.local_ranks(trainer, cfg):
        started = time.perf_counter()
        # weights_only=True, explicitly: TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD cannot then turn pickle execution on
        trainer.fit(module, datamodule=data, ckpt_path=ckpt_path, weights_only=True)
        record["wall_seconds"] = time.perf_counter() - started
        # now: evaluating the best checkpoint restores the callbacks' states too, the curve's as it was then
        judged = _convergence(trainer)
        best = _checkpoint_to_evaluate(trainer)
        evaluate = {"datamodule": data, "ckpt_path": best, "verbose": False, "weights_only": True}
        metrics.update(_validate(trainer, module, evaluate))
        if cfg.test:
            for result in trainer.test(module, **evaluate):
                metrics.update(result)
            if hasattr(module, "by_length"):  # seq2seq: exact match against source length
                record["by_length"] = module.by_length()
    record.update(
        status="completed",
        error=None,
        metrics={k: float(v) for k, v in metrics.items()},
        params=module.num_parameters(),
        train_seconds=module.train_seconds,  # compiling included: `compile.seconds` says how much
        compile=module.compile_record(),
        # every rank trains as many batches of about as many examples: this rank's rate times their number
        samples_per_second=(
            module.train_samples * trainer.world_size / module.train_seconds if module.train_seconds else None
        ),
        epochs=trainer.current_epoch,
        steps=trainer.global_step,
        checkpoint=best,
        **_state(module, task),
        **judged,
    )
    record.write()
    if record.lead and cfg.summary:
        _print_summary(record)
    if cfg.optimized_metric not in record["metrics"]:  # else an Optuna study fails every trial, quietly
        log.warning(
            "optimized_metric=%s is not a metric of this run; it has %s",
            cfg.optimized_metric,
            ", ".join(sorted(record["metrics"])),
        )
    return record["metrics"].get(cfg.optimized_metric)


def _state(module: Any, task: Any) -> dict[str, Any]:
    """A decoding model's state per sequence after the task's longest test sequence, in bytes (`attnx
    report --pareto state`'s axis; None where a mechanism declares none); nothing for other models."""
    if not hasattr(module.model, "state_bytes"):
        return {}
    n = task.shape().source["test"]
    return {"state_bytes": module.model.state_bytes(n), "state_at": n}


def _config(run: ResolvedRun, cfg: DictConfig) -> dict[str, Any]:
    """results.json's `config`: the run's resolved sections, and the nodes Hydra instantiates for
    Lightning (trainer, callbacks, loggers, paths), which resolve here, inside the job."""
    plumbing = {key: OmegaConf.to_container(cfg[key], resolve=True) for key in PLUMBING if key in cfg}
    return {**thawed(run.sections), **plumbing}


def _validate(trainer: Any, module: Any, evaluate: dict[str, Any]) -> dict[str, float]:
    """The best checkpoint's validation metrics. Fit's last validation measured them already when the
    best checkpoint was saved right after it (often: the last epoch is the best): then they are taken
    from it and logged as `trainer.validate` logs them, instead of loading and validating the same
    weights again (tests/e2e/train/test_final_validation.py checks both ways agree)."""
    from attnx.lit.checkpoints import known_validation

    known = known_validation(trainer, evaluate["ckpt_path"])
    if known is None:
        return {k: v for result in trainer.validate(module, **evaluate) for k, v in result.items()}
    trainer._logger_connector.log_metrics(dict(known))  # the loggers' row that validate's epoch end writes
    return {k: v.item() for k, v in known.items()}


def _convergence(trainer: Any) -> dict[str, Any]:
    """The record's `curve` (every val metric per validation of fit: [[step, value], ...]) and
    `convergence` (attnx.track.convergence's verdict on the judged metric's curve)."""
    from attnx.lit.convergence import Convergence

    judge = next(c for c in trainer.callbacks if isinstance(c, Convergence))
    return {"curve": judge.curve, "convergence": judge.verdict()}


def _checkpoint_to_evaluate(trainer: Any) -> str | None:
    """The best checkpoint; without one, the last (a run shorter than its first validation, such as a
    smoke test with `trainer.max_steps` under an epoch, has none chosen by the monitored metric); None
    without checkpoints (`callbacks.model_checkpoint=null`): the weights in memory."""
    callback = trainer.checkpoint_callback
    best = getattr(callback, "best_model_path", "") or None
    last = getattr(callback, "last_model_path", "") or None
    if best is None and last is not None:
        log.warning(
            "no best checkpoint by %s (training ended at step %d, before a validation chose one): "
            "validating and testing the last, %s",
            callback.monitor,
            trainer.global_step,
            last,
        )
    return best or last


def _interrupted(record: Record, signum: int, trainer: Any) -> None:
    """Record a run stopped by a signal, with the checkpoint it saved and how far it got."""
    saved = None
    if trainer is not None:
        from attnx.lit.interrupt import SaveOnInterrupt

        saved = next((c.saved for c in trainer.callbacks if isinstance(c, SaveOnInterrupt)), None)
        # stopped after fit (in the final validation or test): its last checkpoint is where it got to
        saved = saved or getattr(trainer.checkpoint_callback, "last_model_path", None) or None
        record.update(epochs=trainer.current_epoch, steps=trainer.global_step, **_convergence(trainer))
    name = signal.Signals(signum).name
    record.update(status="interrupted", error=f"interrupted by {name}", checkpoint=saved)
    record.write_last()


def _save_config(cfg: DictConfig, hc: Any, output_dir: Path) -> None:
    """`.hydra/`: what Hydra saves before a job, saved here once the run holds its folder's lock
    (conf/hydra/default.yaml sets `output_subdir: null`), so a second run in the folder overwrites nothing."""
    folder = output_dir / ".hydra"
    folder.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, folder / "config.yaml")
    OmegaConf.save(OmegaConf.create({"hydra": hc}), folder / "hydra.yaml")
    OmegaConf.save(hc.overrides.task, folder / "overrides.yaml")


def _fail(record: Record, error: BaseException, multirun: bool, user_error: bool) -> float:
    record.update(
        status="failed", error=f"{type(error).__name__}: {one_line(error)}", traceback=traceback.format_exc()
    )
    record.write_last()
    output_dir = record.output_dir
    if os.environ.get("HYDRA_FULL_ERROR") == "1" and not multirun:
        raise error
    if multirun:
        log.error(
            "run %s failed: %s (recorded in results.json; the sweep goes on)", output_dir, record["error"]
        )
        return math.nan
    if user_error:
        raise UserError(one_line(error)) from error
    from attnx.lit.module import NonFiniteLoss

    if isinstance(error, (OSError, NonFiniteLoss)):  # the machine or the numbers, not a bug: no traceback
        raise RunFailed(f"run failed: {one_line(error)} (recorded in {output_dir}/results.json)") from error
    raise error


def _print_summary(record: dict[str, Any]) -> None:
    c = record["choices"]
    speed = record["samples_per_second"]
    print(
        f"\nattnx: task={c['task']} encoder={c['encoder']} attention={c['attention']} score={c['score']}"
        f"  ({record['train_seconds']:.0f} s training, {speed or 0:.0f} samples/s, "
        f"{record['params']:,} parameters)"
    )
    for key in sorted(record["metrics"]):
        print(f"  {key:<22} {record['metrics'][key]:.4f}")
    print(f"  run folder: {record['output_dir']}")
