"""`attnx train`'s command line: plugins are loaded and the overrides checked before Hydra composes; Hydra
then runs `attnx.train.run.train` once per job (a multirun: once per job, under the chosen launcher).

Exit codes: 0 success; 1 a run failed (in a sweep: after every run has ended); 2 bad input, checked before
training; 128+N a signal N.
"""

from __future__ import annotations

import os
import sys

import hydra
from omegaconf import DictConfig

from attnx import registry
from attnx.config.compose import CONF_DIR, ConfigError, check_overrides, renamed_keys, search_path_override
from attnx.track import sweep
from attnx.track.signals import Interrupted
from attnx.train.preflight import check_sweep
from attnx.train.run import RunFailed, UserError, train

HELP = ("-h", "--help", "--hydra-help")


def main(argv: list[str]) -> int:
    argv = renamed_keys(argv)  # `model.dropout=...` is `classifier.dropout=...` now
    try:
        if not any(flag in argv for flag in HELP):  # help imports no plugin code
            registry.load_all()
            sweep_to_launch = check_overrides(argv)
            if sweep_to_launch is not None:
                check_sweep(*sweep_to_launch)
    except (ConfigError, registry.RegistryError, registry.PluginImportError) as error:
        print(f"attnx train: {error}", file=sys.stderr)
        return 2
    os.environ[sweep.PARENT] = str(os.getpid())  # a launcher's workers watch this process
    saved, sys.argv = sys.argv, ["attnx train", *with_search_path(argv)]  # @hydra.main reads sys.argv
    try:
        _hydra_main()
    except UserError as error:
        print(f"attnx train: {error}", file=sys.stderr)
        return 2
    except RunFailed as error:
        print(f"attnx train: {error}", file=sys.stderr)
        return 1
    except Interrupted as error:
        print(f"attnx train: {error}", file=sys.stderr)
        return error.exit_code
    finally:
        sys.argv = saved
    return 1 if sweep.take_failed() else 0


def with_search_path(argv: list[str]) -> list[str]:
    """`argv` with the user's config folders (`search_path_override`) among its overrides: right before
    the first, or last when it has none. Hydra's argparse takes the overrides as one run of positional
    arguments, so one put before a flag (`hydra.searchpath=[...] -m task=a,b`) left the rest unparsed."""
    overrides = (i for i, a in enumerate(argv) if not a.startswith("-") and ("=" in a or a.startswith("~")))
    first = next(overrides, len(argv))
    return [*argv[:first], *search_path_override(), *argv[first:]]


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="train")
def _hydra_main(cfg: DictConfig) -> float | None:
    return train(cfg)
