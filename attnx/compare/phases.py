"""How a compare's phases run. The learning-rate search and the final runs are each one Hydra multirun of
exactly their jobs (`launch`); the bench phase measures every arm's mechanism (a plan's, each of its
layers') as self-attention through `attnx.bench.points` and takes the timings back as values
(`inference_ms`).
"""

from __future__ import annotations

import logging
import re
import statistics
from collections.abc import Iterable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from attnx import registry
from attnx.compare.plan import Arm, Job
from attnx.compare.progress import Progress
from attnx.config.resolved import UNRESULTED
from attnx.report.document import slug

log = logging.getLogger("attnx")


def launch(
    folder: Path,
    cfg: DictConfig,
    jobs: list[Job],
    runs: list[str],
    search: bool = False,
    only: Iterable[int] | None = None,
) -> int:
    """One multirun of the jobs (job i in `folder/i`; `only`: of these i) that have not completed with their
    overrides already; how many of those did not complete."""
    from attnx.track.results import completed

    chosen = range(len(jobs)) if only is None else only
    planned = {i: jobs[i].overrides(cfg.tasks[jobs[i].task], search) for i in chosen}
    todo = {
        i: job
        for i, job in planned.items()
        if not ((record := completed(folder / str(i))) and same(record["overrides"], [*runs, *job]))
    }
    if not todo:
        log.info("%s: all %d runs completed, nothing to launch", folder, len(planned))
        print(f"attnx compare: {folder}: all {len(planned)} runs completed", flush=True)
        return 0
    folder.mkdir(parents=True, exist_ok=True)
    plan = folder / "plan.yaml"
    # each job names its folder: a launch of some of the jobs keeps job i in folder/i
    OmegaConf.save(OmegaConf.create([[*job, f"hydra.sweep.subdir={i}"] for i, job in todo.items()]), plan)
    hydra_lines = "hydra/hydra_logging=launch_file"  # Hydra's own lines: to folder/launch.log
    sweep = ["hydra/sweeper=plan", f"hydra.sweeper.plan={plan}", f"hydra.sweep.dir={folder}", hydra_lines]
    with Progress(folder, {i: jobs[i] for i in todo}, cfg):  # one line per finished run
        multirun([*sweep, *runs])
    return sum(completed(folder / str(i)) is None for i in todo)


def multirun(overrides: list[str]) -> int:
    """`attnx train -m` over `overrides`: a Hydra multirun is its overrides (here, the plan sweeper
    reading the jobs from a file), so they are all compare hands to training; its exit code."""
    from attnx.train.cli import main

    return main(["-m", *overrides])


def same(recorded: list[str], planned: list[str]) -> bool:
    """Whether a completed run's overrides are the planned ones, as Hydra's grammar reads them (a job
    records no `hydra...` override, and no key of UNRESULTED changes a result)."""
    return _normal(recorded) == _normal(planned)


def _normal(overrides: list[str]) -> list[str]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    return sorted(
        f"{o.key_or_group}={o.get_value_element_as_str()}"
        for o in parsed
        if re.split(r"[./]", o.key_or_group, maxsplit=1)[0] not in (*UNRESULTED, "hydra")
    )


def inference_ms(folder: Path, cfg: DictConfig, arms: list[Arm]) -> dict[str, float]:
    """Arm label -> forward ms as self-attention at `bench.n` tokens, measured with `attnx bench`'s
    defaults; a plan's arm (`base_conv+based`) the mean of its layers' mechanisms, each timed so: the time
    of one of its layers, as an arm of one mechanism has. Each arm's points are kept in
    `folder/<arm>/bench.csv` for the record, never read back."""
    import torch

    from attnx.bench.cli import write_csv
    from attnx.bench.points import Timing, default_device, measure_all
    from attnx.bench.settings import PLAN, attention_settings

    measured: dict[str, float] = {}
    for arm in arms:
        chosen = mechanism_of(arm)
        names, score = ([chosen[0]], chosen[1]) if chosen else (arm.label.split(PLAN), None)
        try:
            settings = attention_settings(
                names, [score] if score else None, [cfg.bench.dim], [cfg.bench.heads], causal=False
            )
            points = measure_all(settings, [cfg.bench.n], Timing(), torch.device(default_device()))
        except (ValueError, registry.PluginImportError) as error:
            log.warning("attnx bench failed for %s (%s); its inference time is left out", arm.label, error)
            continue
        found = {label: series[0] for label, series in points.items()}
        out = folder / slug(arm.label)
        out.mkdir(parents=True, exist_ok=True)
        write_csv(out / "bench.csv", list(found.values()))
        # a plan's pattern repeats whole, so each of its entries is as many of the model's layers
        measured[arm.label] = statistics.fmean(found[s.label].fwd_ms for s in settings)
    return measured


def mechanism_of(arm: Arm) -> tuple[str, str | None] | None:
    """The registered name of an arm's mechanism, and its score as given (None: the mechanism's own);
    None for an lm plan's arm (`lm.layers`), which has a mechanism per layer."""
    chosen = dict(o.split("=", 1) for o in arm.overrides if "." not in o.split("=", 1)[0])
    if "attention" not in chosen:
        return None
    return registry.registry("attention").canonical(chosen["attention"]), chosen.get("score")
