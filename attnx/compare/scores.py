"""MAD's scores (Poli et al. 2024, "Mechanistic Design and Scaling of Hybrid Architectures"; athms/mad-lab's
analysis): a run's score on a task setting is its best test metric over the lr x weight-decay grid,

    s(task, arm, seed) = max over (lr, wd) in grid of test(task, arm, seed, lr, wd),

and a capability's score is the mean over its settings (the suite tasks that name it as `capability`),

    S(capability, arm, seed) = mean over tasks t of the capability of s(t, arm, seed),

reported as the mean and spread over seeds. A seed whose arm lacks a setting's score (the arm cannot run
it, or a run did not complete) gives no capability score: a mean over fewer settings would not compare.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from attnx.report.runs import value


def best_over_grid(runs: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """Of the completed labelled runs with `metric`, the one with the highest per (task, mechanism, seed);
    the first in `runs` among equals."""
    best: dict[tuple[Any, ...], dict[str, Any]] = {}
    for run in runs:
        if run.get("status") != "completed" or metric not in run.get("metrics", {}):
            continue
        key = (run["labels"]["task"], run["labels"]["mechanism"], value(run, "seed"))
        if key not in best or run["metrics"][metric] > best[key]["metrics"][metric]:
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
    from runs scored once per (task, mechanism, seed) (`best_over_grid`'s)."""
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
