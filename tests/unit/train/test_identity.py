"""When a folder's earlier run is the run about to start (`attnx.train.identity`): the same job less the keys
that change no result; and whether a resumed run is the run its key describes, so that the run store keeps
it (trained from scratch, resumed from the same job, or continued from a completed run its budget stopped)."""

from __future__ import annotations

from typing import Any

import pytest
from omegaconf import OmegaConf

from attnx.train.identity import resumes_exactly, same_run

JOB = ["task=reverse", "attention=additive", "seed=0", "trainer.max_epochs=2"]


@pytest.mark.parametrize(
    ("other", "same"),
    [
        (["resume=auto", "store=/s", "summary=false", "compile_cache=/c", "logger=csv"], True),
        (["paths.output_dir=/elsewhere", "+logger.csv.name=x"], True),
        (["optim.lr=0.01"], False),
        (["ckpt_path=/x.ckpt"], False),  # started from another checkpoint: another run
        (["storey=1"], False),  # a key that merely starts like one of them
    ],
)
def test_the_same_job_is_the_same_less_what_changes_no_result(other: list[str], same: bool) -> None:
    assert same_run(JOB, [*JOB, *other]) is same


def record(overrides: list[str], **fields: Any) -> dict[str, Any]:
    epochs = next(int(o.split("=")[1]) for o in reversed(overrides) if o.startswith("trainer.max_epochs="))
    return {
        "overrides": overrides,
        "status": "completed",
        "config": {"trainer": {"max_epochs": epochs, "max_steps": -1}},
        "epochs": epochs,
        "resumed_from": None,
        **fields,
    }


def trainer(epochs: int) -> Any:
    return OmegaConf.create({"max_epochs": epochs, "max_steps": -1})


def test_a_run_trained_from_scratch_or_resumed_from_its_own_job_is_the_run() -> None:
    assert resumes_exactly(record(JOB), None, trainer(2))
    interrupted = record(JOB, status="running", epochs=1)
    assert resumes_exactly(record(JOB, resumed_from="last.ckpt"), interrupted, trainer(2))
    assert not resumes_exactly(record(JOB, resumed_from="x.ckpt"), None, trainer(2))  # whose checkpoint?


def test_a_continuation_is_the_longer_run_only_from_a_run_its_budget_stopped() -> None:
    longer = [*JOB, "trainer.max_epochs=4"]
    continued = record(longer, resumed_from="last.ckpt")
    assert resumes_exactly(continued, record(JOB), trainer(4))
    # stopped before its budget (converged and stopped early): going on is not what the longer run did
    assert not resumes_exactly(continued, record(JOB, epochs=1), trainer(4))
    shorter = record([*JOB, "trainer.max_epochs=1"], resumed_from="last.ckpt")
    assert not resumes_exactly(shorter, record(JOB), trainer(1))  # a shorter budget from a longer run
    other = record([*longer, "optim.lr=0.01"], resumed_from="last.ckpt")
    assert not resumes_exactly(other, record(JOB), trainer(4))  # another job's checkpoint
    assert not resumes_exactly(continued, record(JOB, status="failed"), trainer(4))
