"""The compare report of a fabricated finished compare (run folders with results.json, no training): which
suite tasks pass the discrimination rule, each configuration's convergence, a difference with a side
still improving reported as "not converged: raise the budget", the note on the seeds p < 0.01 needs, and
each task's arms at every test length, and a task paired against its own baseline."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from attnx.compare.plan import Arm, Job
from attnx.compare.report import CompareStudy, write_report
from attnx.track.results import write_results

SEEDS = (0, 1, 2)
# (task, arm) -> its mean and whether its runs converged: reverse discriminates; listops separates
# nothing; on hard, the only arm near the ceiling is still improving
FINISHED = {
    ("reverse", "additive"): (0.97, True),
    ("reverse", "none"): (0.20, True),
    ("reverse", "local_window"): (0.50, False),
    ("listops", "additive"): (0.36, True),
    ("listops", "none"): (0.35, True),
    ("listops", "local_window"): (0.35, True),
    ("hard", "additive"): (0.99, False),
    ("hard", "none"): (0.30, True),
    ("hard", "local_window"): (0.40, True),
}


def record(arm: str, seed: int, score: float, converged: bool) -> dict[str, Any]:
    return {
        "status": "completed",
        "overrides": [f"attention={arm}", f"seed={seed}"],
        "choices": {"task": "synthetic", "encoder": "rnn", "attention": arm, "score": None},
        "config": {"seed": seed},
        "model_type": "classification",
        "metrics": {"test/acc": score + seed / 1000, "test@2x/acc": score / 2},
        "params": 1000,
        "train_seconds": 1.0,
        "convergence": {
            "metric": "val/acc",
            "tolerance": 0.005,
            "ceiling": 1.0,
            "validations": 8,
            "improvement": 0.0 if converged else 0.05,
            "converged": converged,
            "reason": "plateaued" if converged else "still improving",
        },
    }


def test_the_report_says_which_tasks_discriminate_and_never_ranks_an_unconverged_difference(
    tmp_path: Path,
) -> None:
    arms = {
        label: Arm(label, (f"attention={label}",), label == "local_window")
        for label in ("additive", "none", "local_window")
    }
    jobs = [Job(task, arms[arm], seed) for (task, arm) in FINISHED for seed in SEEDS]
    for i, job in enumerate(jobs):
        score, converged = FINISHED[(job.task, job.arm.label)]
        write_results(tmp_path / "runs" / str(i), record(job.arm.label, job.seed, score, converged))
    task = {"metric": "test/acc", "overrides": ["task=synthetic"], "ceiling": None}
    cfg = OmegaConf.create(
        {
            # hard pairs the arms against its own baseline, as an lm task against softmax attention
            "tasks": {"reverse": task, "listops": task, "hard": {**task, "baseline": "none"}},
            "seeds": list(SEEDS),
            "mechanisms": ["additive", "none"],
            "baseline": "additive",
            "bench": {"n": 16},
            "protocol": {"lr_search": False, "match_params": False},
            "discrimination": {"ceiling_fraction": 0.95, "spread": 0.10},
        }
    )
    study = CompareStudy(tmp_path, cfg, "tiny", arms["local_window"], jobs, [], {}, {}, {}, ["attnx compare"])
    write_report(study)
    md = re.sub(" +", " ", (tmp_path / "report.md").read_text())  # table cells unpadded
    rule = md.split("## Discrimination")[1].split("##")[0]
    assert "| reverse | 1 | 0.950 | additive 0.971 | 0.770 (additive − none) | passes |" in rule
    assert "| listops | 1 | 0.950 | additive 0.361 | 0.010 (additive − none) | fails: (a) the best " in rule
    assert "(b) best − worst = 0.010 < 0.100 |" in rule
    assert "| hard | 1 | 0.950 | none 0.301 | 0.690 (additive − none) | fails: (a) the best converged" in rule
    convergence = md.split("## Convergence")[1].split("##")[0]
    assert "| local_window | still improving (3 of 3) | converged 3/3 | converged 3/3 |" in convergence
    verdicts = md.split("## Statistics")[1].split("##")[0]
    assert "task=reverse | local_window | 3 |" in verdicts
    reverse = next(line for line in verdicts.splitlines() if "task=reverse | local_window" in line)
    assert "not converged: raise the budget" in reverse
    assert "Paired against `mechanism=additive`**; task=hard: `mechanism=none` on" in verdicts
    assert "task=hard | additive | 3 |" in verdicts and "task=hard | none |" not in verdicts
    assert "task=reverse | none | 3 |" in verdicts
    assert "p < 0.01 needs 8 seeds (`seeds=8`)" in md.split("## Ranking")[0]
    assert "0.501* [" in md.split("## Ranking")[1].split("##")[0]  # local_window on reverse, marked
    lengths = md.split("## Length generalisation")[1].split("##")[0]  # each task ranked per test slice
    assert "| additive | 0.971 | 1 | 0.485 | 1 |" in lengths and (tmp_path / "slices_reverse.png").exists()
