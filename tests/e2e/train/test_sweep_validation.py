"""A config error in any job of a sweep, a plan or an Optuna search space stops the sweep before any
job launches: one stderr line naming the job and the key, exit 2, and no run folder written."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.tiny import TINY, TINY_RNN, train


def refused(capsys: pytest.CaptureFixture[str], sweep: Path, *overrides: str) -> str:
    """The one stderr line of a sweep refused with exit 2 before any of its jobs ran."""
    capsys.readouterr()
    assert train(sweep, *TINY_RNN, *TINY, *overrides, sweep=True) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert not list(sweep.rglob("results.json")), "a job ran"
    return err


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        # a type Lightning's Trainer would reject only when its fit loop compares it
        (["trainer.max_epochs=1,ten"], "job 1 (trainer.max_epochs=ten): trainer.max_epochs=ten: expected"),
        # a task's own argument check, in the second job only: the first must not run either
        (
            ["task.min_len=12", "task.max_len=20,6"],
            "job 1 (task.max_len=6): task.max_len=6 is invalid: must be >= min_len (12)",
        ),
    ],
)
def test_a_bad_value_in_one_job_stops_the_sweep_before_any_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: list[str], said: str
) -> None:
    assert said in refused(capsys, tmp_path / "sweep", *overrides)


@pytest.mark.parametrize(
    ("job", "said"),
    [
        ("optim.lr=fast", "job 1 (optim.lr=fast): "),
        ("encoder.hidden_size=8", "job 1 (encoder.hidden_size=8): Could not override 'encoder.hidden_size'"),
        ("encoder.hidden_dim=0", "job 1 (encoder.hidden_dim=0): encoder.hidden_dim=0: must be a positive"),
    ],
)
def test_a_bad_plan_job_stops_the_plan_before_any_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], job: str, said: str
) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"- [seed=1]\n- [{job}]\n")
    err = refused(capsys, tmp_path / "sweep", "hydra/sweeper=plan", f"hydra.sweeper.plan={plan}")
    assert said in err and job.split("=")[0] in err


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (None, "cannot read it"),
        ("", "must be a list of jobs"),
        ("[]\n", "lists no jobs"),
        ("- [seed=1\n", "cannot read it"),
        ("- seed=1\n", "must be a list of jobs, each a list of overrides"),
    ],
)
def test_a_missing_empty_or_malformed_plan_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | None, said: str
) -> None:
    plan = tmp_path / "plan.yaml"
    if text is not None:
        plan.write_text(text)
    err = refused(capsys, tmp_path / "sweep", "hydra/sweeper=plan", f"hydra.sweeper.plan={plan}")
    assert f"hydra.sweeper.plan={plan}: {said}" in err


@pytest.mark.parametrize(
    ("plan", "said"),
    [
        ("[]", "lists no jobs"),
        ("['seed=1']", "must be a list of jobs, each a list of overrides"),
        ("[['seed=1'],[3]]", "must be a list of jobs, each a list of overrides"),
    ],
)
def test_an_inline_plan_that_is_not_a_list_of_jobs_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], plan: str, said: str
) -> None:
    err = refused(capsys, tmp_path / "sweep", "hydra/sweeper=plan", f"hydra.sweeper.plan={plan}")
    assert f"hydra.sweeper.plan (inline): {said}" in err


def test_an_optuna_search_space_is_checked_on_its_choices_and_bounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    search = ["hparams_search=optuna", "hydra.sweeper.n_trials=2"]
    err = refused(capsys, tmp_path / "a", *search, "decoder.hidden_dim=choice(8,0)")
    assert "a trial with decoder.hidden_dim=0" in err and "decoder.hidden_dim=0: must be a positive" in err
    # an interval's bound: Optuna could draw a rate at or near it
    err = refused(capsys, tmp_path / "b", *search, "optim.lr=interval(0,0.1)")
    assert "optim.lr=0" in err and "optim.lr must be > 0" in err


def test_a_slurm_sweep_is_not_held_to_this_machines_accelerators(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # job 0 asks for a GPU that a login node may lack: checked up to job 1's bad rate, never submitted
    err = refused(capsys, tmp_path / "sweep", "hydra/launcher=slurm", "trainer=gpu", "optim.lr=0.1,-1")
    assert "job 1 (optim.lr=-1): optim.lr must be > 0" in err
