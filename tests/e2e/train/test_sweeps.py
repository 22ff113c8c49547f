"""Sweeps end to end: launchers that run jobs in other processes (joblib, submitit), an Optuna study, a
crashing run that leaves the others' results, and `resume=auto` on a sweep launched again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from helpers.tiny import TINY, TINY_RNN, results, train

# A plugin score that leaves "<pid> <torch threads>" in `trace` each time it is built, so the test sees
# which process ran the run and with how many threads.
PLUGIN = '''
import os
import torch
from attnx import Score, register_score

TRACE = {trace!r}


@register_score("sweep_bilinear")
class SweepBilinear(Score):
    """f(q, k) = qᵀWk with W initialised to the identity."""

    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__(query_dim, key_dim)
        self.weight = torch.nn.Parameter(torch.eye(query_dim, key_dim))
        with open(TRACE, "a") as trace:
            trace.write(f"{{os.getpid()}} {{torch.get_num_threads()}}\\n")

    def forward(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return query @ self.weight @ keys.transpose(-1, -2)
'''


@pytest.mark.engines  # joblib's process pool, its workers importing Lightning
def test_joblib_sweep_runs_a_plugin_score_in_worker_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugins, trace = tmp_path / "plugins", tmp_path / "trace.txt"
    plugins.mkdir()
    (plugins / "sweep_bilinear.py").write_text(PLUGIN.format(trace=str(trace)))
    monkeypatch.setenv("ATTNX_PLUGIN_PATH", str(plugins))
    sweep = tmp_path / "sweep"
    scores = ["dot", "general", "sweep_bilinear"]
    train(
        sweep,
        "hydra/launcher=joblib",
        "attention=dot",
        f"score={','.join(scores)}",
        *TINY_RNN,
        *TINY,
        sweep=True,
    )
    records = results(sweep)
    assert sorted(r["choices"]["score"] for r in records) == scores
    assert all(r["status"] == "completed" for r in records), [r["error"] for r in records]
    built = [line.split() for line in trace.read_text().splitlines()]
    # The runs were built in loky workers, not in this process, with one torch thread (no oversubscription).
    # This process built the plugin only before launching, for the conformance kit's checks
    # (attnx.train.preflight).
    launched = next(i for i, (pid, _) in enumerate(built) if pid != str(os.getpid()))
    assert all(pid != str(os.getpid()) and threads == "1" for pid, threads in built[launched:])


@pytest.mark.engines  # submitit's job process, importing Lightning
def test_submitit_local_runs_a_job_in_its_own_process(tmp_path: Path) -> None:
    launcher = ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5"]
    train(tmp_path, *launcher, "attention=additive", *TINY_RNN, *TINY, sweep=True)
    (record,) = results(tmp_path)
    assert record["status"] == "completed", record["error"]
    (result,) = (tmp_path / ".submitit").glob("*/*_result.pkl")  # in <job id = the job's pid>/
    assert int(result.parent.name) != os.getpid()


def test_optuna_study_of_three_trials_persists_in_sqlite(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    train(
        tmp_path / "sweep",
        "hparams_search=optuna",
        "hydra.sweeper.n_trials=3",
        f"hydra.sweeper.storage={storage}",
        "hydra.sweeper.study_name=tiny",
        "decoder.hidden_dim=choice(8,16)",  # the command line narrows the YAML's search space
        "attention.num_heads=choice(1,2)",
        *TINY_RNN,
        *TINY,
        sweep=True,
    )
    records = results(tmp_path / "sweep")
    assert len(records) == 3 and all(r["status"] == "completed" for r in records)
    trials = optuna.load_study(study_name="tiny", storage=storage).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    assert {t.value for t in trials} == {r["metrics"]["val/exact_match"] for r in records}
    assert all(1e-4 < t.params["optim.lr"] < 1e-2 for t in trials)
    assert "best_params" in (tmp_path / "sweep" / "optimization_results.yaml").read_text()


EXPLODING = """
from attnx import register_score
from attnx.nn.scores import DotScore


@register_score("exploding")
class ExplodingScore(DotScore):
    # it passes the conformance kit before training (whose batches are of 3 sequences at most), then
    # crashes in the first backward of a training batch
    def forward(self, query, keys):
        scores = super().forward(query, keys)
        if scores.requires_grad and query.size(0) > 8:
            scores.register_hook(self.explode)
        return scores

    def explode(self, grad):
        raise RuntimeError("boom: this score always fails")
"""


def test_a_crashing_run_is_recorded_and_the_others_are_reported(tmp_path: Path) -> None:
    # A plugin that raises inside trainer.fit; in its own process, so it never joins this one's registry.
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "exploding.py").write_text(EXPLODING)
    sweep = tmp_path / "sweep"
    args = [
        "-m",
        "attention=dot",
        "score=dot,exploding,general",
        *TINY_RNN,
        *TINY,
        f"hydra.sweep.dir={sweep}",
    ]
    code = "import sys, attnx.cli; sys.exit(attnx.cli.main(sys.argv[1:]))"
    trusted = os.environ | {"ATTNX_PLUGIN_PATH": "plugins"}
    done = subprocess.run(
        [sys.executable, "-c", code, "train", *args],
        cwd=tmp_path,
        env=trusted,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stderr  # after every run has ended, since one failed
    assert f"2 completed, 1 failed: see {sweep / '1' / 'results.json'}" in done.stdout
    by_score = {r["choices"]["score"]: r for r in results(sweep)}
    assert by_score["exploding"]["status"] == "failed"
    assert "boom: this score always fails" in by_score["exploding"]["error"]
    assert by_score["dot"]["status"] == by_score["general"]["status"] == "completed"

    report = subprocess.run(
        [sys.executable, "-c", code, "report", str(sweep)], capture_output=True, text=True, check=True
    ).stdout
    table, failed = report.split("runs that did not complete:")
    assert "| score " in table and "| dot " in table and "| general " in table
    assert "exploding" not in table and "| exploding " in failed and "boom" in failed
    assert "2/3 runs completed; 1 failed" in failed


def test_resume_auto_skips_completed_runs_and_resumes_the_rest(tmp_path: Path) -> None:
    sweep = ["resume=auto", "attention=additive,dot", *TINY_RNN, *TINY]
    train(tmp_path, *sweep, sweep=True)
    first, second = (tmp_path / str(n) / "results.json" for n in (0, 1))
    # Run 1 "was killed" after its checkpoint: its record still says running.
    record = json.loads(second.read_text()) | {"status": "running"}
    second.write_text(json.dumps(record))
    before = first.read_text()

    train(tmp_path, *sweep, sweep=True)
    assert first.read_text() == before  # completed with the same overrides: skipped, not retrained
    resumed = json.loads(second.read_text())
    assert resumed["status"] == "completed"
    assert resumed["resumed_from"] == str(tmp_path / "1" / "checkpoints" / "last.ckpt")


def test_a_plan_sweep_runs_exactly_its_jobs_crossed_with_the_command_lines_sweeps(tmp_path: Path) -> None:
    # two jobs that differ in several keys at once, which no cartesian product of comma lists gives
    plan = tmp_path / "plan.yaml"
    plan.write_text("- [attention=additive]\n- [attention=dot, score=general, decoder.hidden_dim=24]\n")
    sweep = tmp_path / "sweep"
    code = train(
        sweep, "hydra/sweeper=plan", f"hydra.sweeper.plan={plan}", "seed=0,1", *TINY_RNN, *TINY, sweep=True
    )
    assert code == 0
    found = [
        (
            r["choices"]["attention"],
            r["choices"]["score"],
            r["config"]["seed"],
            r["config"]["decoder"]["hidden_dim"],
        )
        for r in results(sweep)
    ]
    # numbered plan job by plan job, each crossed with seed=0,1
    assert found == [
        ("additive", "additive", 0, 16),
        ("additive", "additive", 1, 16),
        ("dot", "general", 0, 24),
        ("dot", "general", 1, 24),
    ]


def test_a_plan_given_inline_runs_its_jobs(tmp_path: Path) -> None:
    # an experiment config carries its jobs as the list itself (experiment=zoology_state); so may a command
    # line
    plan = "hydra.sweeper.plan=[['attention=additive'],['attention=dot','score=general']]"
    assert train(tmp_path, "hydra/sweeper=plan", plan, *TINY_RNN, *TINY, sweep=True) == 0
    records = results(tmp_path)
    assert [(r["choices"]["attention"], r["choices"]["score"]) for r in records] == [
        ("additive", "additive"),
        ("dot", "general"),
    ]
    assert not any("state_bytes" in r for r in records)  # a seq2seq model decodes no token stream of its own
