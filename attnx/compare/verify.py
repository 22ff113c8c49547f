"""`verify=K`: the run store's honesty checked, not assumed. K of the final runs that came from the store,
drawn at random, are trained again without it (`out/verify/i`), and every metric must equal the stored run's
to the last digit; a difference fails the compare loudly (exit 1), naming the run and the metric."""

from __future__ import annotations

import random
from pathlib import Path

from omegaconf import DictConfig

from attnx.compare.phases import launch
from attnx.compare.plan import Job
from attnx.track.results import completed


def verify(out: Path, cfg: DictConfig, jobs: list[Job], runs: list[str]) -> list[str]:
    """The differences found (empty: the store told the truth, or nothing to check), one line each."""
    records = {i: completed(out / "runs" / str(i)) for i in range(len(jobs))}
    stored = [i for i, record in records.items() if record and "stored" in record]
    if cfg.verify <= 0 or not stored:
        return []
    chosen = sorted(random.Random(len(stored)).sample(stored, min(cfg.verify, len(stored))))
    unstored = [o for o in runs if not o.startswith("store=")] + ["store=null"]
    folder = out / "verify"
    launch(folder, cfg, [jobs[i] for i in chosen], unstored)
    found = []
    for n, i in enumerate(chosen):
        was, now = records[i], completed(folder / str(n))
        job = f"{jobs[i].task}/{jobs[i].arm.label}/seed {jobs[i].seed}"
        if now is None or was is None:
            found.append(f"{job}: trained again, it did not complete ({folder / str(n)})")
            continue
        for metric, value in was["metrics"].items():
            if now["metrics"].get(metric) != value:
                found.append(
                    f"{job}: {metric} stored {value!r}, trained again {now['metrics'].get(metric)!r}"
                )
    return found
