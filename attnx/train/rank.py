"""A further rank of a DDP run on this machine, started by `attnx.train.distributed.local_ranks` as
`python -m attnx.train.rank`: it reads the job's Hydra state and config from stdin and runs the job, as
rank 0 does. A module of its own, so that `distributed` (which `run` uses) never imports `run` back."""

from __future__ import annotations

import pickle
import sys


def main() -> int:
    """This job's Hydra state and config from stdin (cloudpickle's output loads with pickle), then the job."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import setup_globals

    from attnx.train.run import train

    state, cfg = pickle.load(sys.stdin.buffer)
    Singleton.set_state(state)
    setup_globals()
    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
