"""The grid's scores (Poli et al. 2024, "Mechanistic Design and Scaling of Hybrid Architectures";
athms/mad-lab's analysis). Under `protocol.grid.enabled` every (task, arm, seed) trains at each (lr, wd) of
the grid, and one point is read per (task, arm, seed), by `protocol.grid.select`:

    validation (default)   the point with the best validation twin of the task's metric (`val/metric`):
                           s(task, arm, seed) = test(task, arm, seed, p*),
                           p* = argbest over (lr, wd) of val(task, arm, seed, lr, wd)
    test                   MAD's own rule, the best test metric over the grid:
                           s(task, arm, seed) = max over (lr, wd) of test(task, arm, seed, lr, wd)

The first makes every choice on validation and reads test once, at the chosen point. The second chooses on
the test set itself: optimistic by construction, and in favour of whichever arm is most sensitive to the
grid, so the report labels it "optimistic (as MAD)" wherever it shows a figure. A capability's score is
the mean over its settings (the suite tasks that name it as `capability`),

    S(capability, arm, seed) = mean over tasks t of the capability of s(t, arm, seed),

reported as the mean and spread over seeds. A seed whose arm lacks a setting's score (the arm cannot run
it, or a run did not complete) gives no capability score: a mean over fewer settings would not compare.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from attnx.compare.records import METRIC, VAL_METRIC
from attnx.report.runs import higher_is_better, value

SELECTIONS = {  # protocol.grid.select -> the metric that picks a grid point
    "validation": VAL_METRIC,
    "test": METRIC,
}
OPTIMISTIC = "optimistic (as MAD)"  # what the report calls a figure chosen on test


def gridded(cfg: DictConfig) -> bool:
    """Whether the runs are MAD's grid (`protocol.grid.enabled`; a config from before the key has none)."""
    return bool(OmegaConf.select(cfg, "protocol.grid.enabled", default=False))


def grid_rule(cfg: DictConfig) -> str:
    """`protocol.grid.select`: validation unless told (a config from before the key has none)."""
    return str(OmegaConf.select(cfg, "protocol.grid.select", default="validation"))


def rule_words(cfg: DictConfig) -> str:
    """How the grid's point is chosen, as the report says it."""
    if grid_rule(cfg) == "test":
        return f"each run's best test metric over the grid, **{OPTIMISTIC}**: chosen on the test set"
    return "the grid point with the best validation metric per (task, arm, seed), its test read there only"


def over_grid(runs: list[dict[str, Any]], rule: str) -> list[dict[str, Any]]:
    """Of the completed labelled runs, one per (task, mechanism, seed): the one whose `SELECTIONS[rule]`
    metric is best (in its declared direction), the first in `runs` among equals; a run without that
    metric, or without the test metric it is read for, is no candidate."""
    by = SELECTIONS[rule]
    higher = higher_is_better(runs, by)
    best: dict[tuple[Any, ...], dict[str, Any]] = {}
    for run in runs:
        found = run.get("metrics", {})
        if run.get("status") != "completed" or by not in found or METRIC not in found:
            continue
        key = (run["labels"]["task"], run["labels"]["mechanism"], value(run, "seed"))
        held = best.get(key)
        if held is None or (found[by] > held["metrics"][by] if higher else found[by] < held["metrics"][by]):
            best[key] = run
    return list(best.values())


def capabilities(tasks: DictConfig) -> dict[str, list[str]]:
    """Capability -> its settings (suite task names, in suite order); a task without one is its own."""
    found: dict[str, list[str]] = {}
    for name, spec in tasks.items():
        found.setdefault(str(spec.get("capability") or name), []).append(str(name))
    return found


def capability_scores(
    runs: list[dict[str, Any]], tasks: DictConfig, metric: str
) -> dict[str, dict[str, dict[Any, float]]]:
    """Capability -> mechanism -> seed -> the mean over the capability's settings of that seed's score,
    from runs scored once per (task, mechanism, seed) (`over_grid`'s)."""
    score = {
        (run["labels"]["task"], run["labels"]["mechanism"], value(run, "seed")): run["metrics"][metric]
        for run in runs
        if run.get("status") == "completed" and metric in run.get("metrics", {})
    }
    mechanisms = list(dict.fromkeys(mechanism for _, mechanism, _ in score))
    seeds = list(dict.fromkeys(seed for _, _, seed in score))
    found: dict[str, dict[str, dict[Any, float]]] = {}
    for capability, settings in capabilities(tasks).items():
        for mechanism in mechanisms:
            for seed in seeds:
                each = [score.get((task, mechanism, seed)) for task in settings]
                if all(s is not None for s in each):
                    mean = sum(s for s in each if s is not None) / len(each)
                    found.setdefault(capability, {}).setdefault(mechanism, {})[seed] = mean
    return found
