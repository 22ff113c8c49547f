"""The processes of a DDP run (`trainer=ddp_cpu`, `trainer=ddp`): which one this is, and starting the
others on this machine.

Every rank runs the whole job, `attnx.train.run.train(cfg)`: it builds the same data and model, trains its
share of each batch, validates and tests. Rank 0 alone holds the run folder's lock and writes
`.hydra/`, results.json and the loggers' files; the heatmaps callback draws on rank 0 only. Where the
other ranks come from:

- under SLURM, from `srun`: one task per device (`hydra.launcher.tasks_per_node` = `trainer.devices`,
  `hydra.launcher.nodes` = `trainer.num_nodes`), each running the job; Lightning's `SLURMEnvironment`
  reads the ranks from SLURM_PROCID and the main node from the job's node list;
- under torchrun, from torchrun;
- otherwise from `local_ranks`. Lightning's own launcher would run this process's command line again
  for each further rank, and under attnx that command is a sweep, a launcher's worker or a test, not
  this job. So attnx starts ranks 1..N-1 itself, as `python -m attnx.train.rank` given this job's
  config and Hydra state (what Hydra's own launchers hand a worker: `Singleton.get_state()`), with the
  variables Lightning reads for processes started outside it (torchrun's MASTER_ADDR, MASTER_PORT,
  WORLD_SIZE, NODE_RANK, LOCAL_RANK), and keeps them in step with this one: they end with it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

log = logging.getLogger("attnx")
CHILD_EXIT_S = 60  # how long rank 0 waits for the others once its run has ended, before killing them
NODE_VARIABLES = ("MASTER_ADDR", "NODE_RANK")  # what Lightning's own environment reads for several nodes
RANK_MAIN = "attnx.train.rank"  # what a started rank runs: named, not imported, since it imports the run


def rank() -> int:
    """This process's global rank in a DDP run, known before any Trainer exists: what Lightning reads
    from the environment (RANK, LOCAL_RANK, SLURM_PROCID); 0 outside DDP."""
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    return int(getattr(rank_zero_only, "rank", 0))  # Lightning sets it on the function at import


def check_nodes(trainer: Any) -> None:
    """A run on several nodes needs what starts and finds the other nodes: a cluster environment that
    Lightning detects (torchelastic/torchrun, SLURM, LSF, MPI), or, in Lightning's own environment,
    MASTER_ADDR and NODE_RANK set on each node. Without them rank 0 would wait forever for nodes that
    nobody starts: a ConfigError before training instead."""
    from lightning.fabric.plugins.environments import LightningEnvironment

    from attnx.config.compose import ConfigError

    environment = getattr(trainer.strategy, "cluster_environment", None)
    unset = [name for name in NODE_VARIABLES if name not in os.environ]
    if trainer.num_nodes > 1 and isinstance(environment, LightningEnvironment) and unset:
        raise ConfigError(
            f"trainer.num_nodes={trainer.num_nodes}: nothing starts the other nodes (no torchrun, SLURM, "
            f"LSF or MPI job, and {' and '.join(unset)} not set), so the run would wait for them forever; "
            "on one machine use trainer.num_nodes=1 (trainer.devices=N for N processes), on SLURM "
            "hydra/launcher=slurm_ddp"
        )


@contextmanager
def local_ranks(trainer: Any, cfg: Any) -> Iterator[None]:
    """While the block runs, ranks 1..N-1 of this node, when `trainer` is rank 0 of a DDP run whose
    processes nobody else starts (no SLURM tasks, no torchrun); otherwise nothing happens."""
    import cloudpickle
    import torch.distributed
    from hydra.core.singleton import Singleton
    from lightning.pytorch.strategies.launchers import _SubprocessScriptLauncher

    from attnx.track import sweep

    launcher = trainer.strategy.launcher
    environment = launcher.cluster_environment if isinstance(launcher, _SubprocessScriptLauncher) else None
    if environment is None or environment.creates_processes_externally:
        yield
        return
    shared = {  # what Lightning's launcher gives its children; LOCAL_RANK makes them "started outside"
        "MASTER_ADDR": environment.main_address,
        "MASTER_PORT": str(environment.main_port),
        "NODE_RANK": str(environment.node_rank()),
        "WORLD_SIZE": str(trainer.num_devices * trainer.num_nodes),
    }
    saved = {key: os.environ.get(key) for key in [*shared, "LOCAL_RANK"]}
    os.environ.update(shared, LOCAL_RANK="0")  # this process is rank 0: Lightning must not launch again
    payload = cloudpickle.dumps((Singleton.get_state(), cfg))
    children = []
    try:
        for local in range(1, trainer.num_devices):
            env = os.environ | {"LOCAL_RANK": str(local), sweep.PARENT: str(os.getpid())}
            child = subprocess.Popen([sys.executable, "-m", RANK_MAIN], stdin=subprocess.PIPE, env=env)
            assert child.stdin is not None
            child.stdin.write(payload)
            child.stdin.close()
            children.append(child)
        yield
    except BaseException:
        for child in children:  # they may wait for this rank in a collective that will never come
            child.terminate()
        raise
    finally:
        for child in children:
            try:
                child.wait(CHILD_EXIT_S)
            except subprocess.TimeoutExpired:
                log.error("rank of pid %d did not end %d s after rank 0; killed", child.pid, CHILD_EXIT_S)
                child.kill()
                child.wait()
        # Lightning leaves the process group up until the process exits: a next DDP run in this process
        # (a sweep, a test) would find it initialised and talk to these ranks, which are gone
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
