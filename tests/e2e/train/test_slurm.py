"""SLURM for real: `hydra/launcher=slurm` against a running slurmctld and slurmd.

The cluster is the one `sinfo` answers for, or else the one-node cluster of scripts/slurm-local.sh,
started here when this process may (root; the script installs slurm-wlm and munge with apt). Where
neither is possible every test is skipped, with the reason. `.ci/run` starts it before `make test`.

Each test submits one sweep from a fresh `attnx train` process (its environment and working folder
are what the jobs inherit, as on a real cluster) and reads what the jobs left: results.json, submitit's
logs and SLURM's own record of the job (`scontrol show job`, kept for MinJobAge after it ends).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lightning.pytorch import Callback, LightningModule, Trainer
from test_sweeps import EXPLODING

from helpers.paths import REPO, TESTS
from helpers.tiny import TINY, TINY_MODEL, TINY_RNN, completed, results, sizes

pytestmark = [pytest.mark.slurm, pytest.mark.engines]
ROOT = REPO
SCRIPT = ROOT / "scripts" / "slurm-local.sh"
SWEEP_TIMEOUT_S = 400  # submitit waits for a job's result file: a job that died without one would hang it


def default_partition() -> str | None:
    """The partition `sinfo` marks as the default (`local*`), None when no cluster answers."""
    if shutil.which("sinfo") is None:
        return None
    try:
        listed = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return None
    names = listed.stdout.split() if listed.returncode == 0 else []
    marked = [name for name in names if name.endswith("*")] or names
    return marked[0].rstrip("*") if marked else None


@pytest.fixture(scope="module")
def partition() -> str:
    """A partition of a live cluster: one that is running, or the script's, started now when possible."""
    found = default_partition()
    if found:
        return found
    if os.geteuid() != 0:
        pytest.skip(
            "no SLURM cluster answers (sinfo); starting one needs root: sudo scripts/slurm-local.sh start"
        )
    started = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, timeout=900)
    found = default_partition()
    if started.returncode or not found:
        said = (started.stderr or started.stdout).strip().splitlines() or ["no output"]
        pytest.skip(f"scripts/slurm-local.sh start failed: {said[-1]}")
    return found


def sweep(
    partition: str,
    folder: Path,
    *overrides: str,
    launcher: str = "slurm",
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """`attnx train -m hydra/launcher=<launcher> ...` into `folder`, run from `cwd` with `env`; the jobs
    of a sweep that outlives SWEEP_TIMEOUT_S are cancelled."""
    queue = [
        f"hydra/launcher={launcher}",
        f"hydra.launcher.partition={partition}",
        "hydra.launcher.mem_gb=1",  # tiny runs: several fit in the node's memory at once
        "hydra.launcher.timeout_min=5",
    ]
    args = ["train", "-m", *queue, *overrides, f"hydra.sweep.dir={folder}"]
    try:
        return subprocess.run(
            [sys.executable, "-m", "attnx.cli", *args],
            cwd=cwd,
            env=env or dict(os.environ),
            capture_output=True,
            text=True,
            timeout=SWEEP_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        subprocess.run(["scancel", *jobs(folder)], check=False)
        raise


def slurm_job(job: str) -> dict[str, str]:
    """SLURM's record of job (or array task) `job` once it has ended (its result file is written a little
    before its process exits): scontrol's `Key=Value` fields."""
    deadline = time.monotonic() + 60
    while True:
        shown = subprocess.run(
            ["scontrol", "-o", "show", "job", job], capture_output=True, text=True, check=True
        )
        fields = dict(re.findall(r"(\w+)=(\S*)", shown.stdout))
        if fields["JobState"] not in ("PENDING", "RUNNING", "COMPLETING") or time.monotonic() > deadline:
            return fields
        time.sleep(0.5)


def jobs(folder: Path) -> list[str]:
    """The SLURM ids of a sweep's jobs, from submitit's folders: `<array>_<task>` for an array's tasks
    (their array has a folder `<array>` too, for the submission), `<job>` for a single job."""
    names = sorted(p.name for p in (folder / ".submitit").glob("*") if p.is_dir())
    return [name for name in names if "_" in name] or names


def test_a_sweep_runs_as_slurm_array_tasks_and_reports(partition: str, tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    done = sweep(partition, folder, "attention=none,additive,dot", *TINY_RNN, *TINY)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"attnx: sweep {folder}: 3 completed" in done.stdout
    records = results(folder)
    assert sorted(r["choices"]["attention"] for r in records) == ["additive", "dot", "none"]
    assert all(r["status"] == "completed" for r in records), [r.get("error") for r in records]
    tasks = jobs(folder)
    assert len(tasks) == 3 and len({t.split("_")[0] for t in tasks}) == 1  # one array, three tasks
    for task in tasks:
        job = slurm_job(task)
        assert job["JobState"] == "COMPLETED" and job["Partition"] == partition, job
        assert job["ArrayJobId"] == task.split("_")[0] and job["BatchHost"]  # run by a slurmd

    report = subprocess.run(
        [sys.executable, "-m", "attnx.cli", "report", str(folder)], capture_output=True, text=True, check=True
    )
    assert "3/3 runs completed" in report.stdout
    assert "| none " in report.stdout and (folder / "report.md").exists()


# A score that leaves the SLURM job and array task it was built in; kept in a folder of ATTNX_PLUGIN_PATH.
TRACED = """
import os
from attnx import register_score
from attnx.nn.scores import DotScore


@register_score("slurm_traced")
class SlurmTraced(DotScore):
    def __init__(self, query_dim: int, key_dim: int) -> None:
        super().__init__(query_dim, key_dim)
        job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
        with open({trace!r}, "a") as trace:
            trace.write(f"{{job}} {{task}}\\n")
"""


def test_plugins_are_found_inside_the_jobs_and_a_crash_leaves_its_siblings_complete(
    partition: str, tmp_path: Path
) -> None:
    launch, extra, trace = tmp_path / "project", tmp_path / "extra", tmp_path / "trace.txt"
    (launch / "plugins").mkdir(parents=True)
    (launch / "plugins" / "exploding.py").write_text(EXPLODING)  # raises in the first backward
    extra.mkdir()
    (extra / "slurm_traced.py").write_text(TRACED.format(trace=str(trace)))
    env = os.environ | {"ATTNX_PLUGIN_PATH": f"{extra}:plugins"}  # ./plugins trusted by name
    folder = tmp_path / "sweep"
    scores = "score=dot,slurm_traced,exploding"
    done = sweep(partition, folder, "attention=dot", scores, *TINY_RNN, *TINY, cwd=launch, env=env)
    assert done.returncode == 1, done.stderr[-3000:]  # after every run has ended, since one failed
    assert f"2 completed, 1 failed: see {folder / '2' / 'results.json'}" in done.stdout
    by_score = {r["choices"]["score"]: r for r in results(folder)}
    assert by_score["dot"]["status"] == by_score["slurm_traced"]["status"] == "completed"
    assert by_score["exploding"]["status"] == "failed"
    assert "boom: this score always fails" in by_score["exploding"]["error"]
    array = jobs(folder)[0].split("_")[0]
    assert f"{array} 1" in trace.read_text().splitlines()  # built in array task 1, under slurmd
    assert slurm_job(f"{array}_2")["JobState"] == "COMPLETED"  # a crashed run is a finished job


class SlowFirstAttempt(Callback):
    """Sleeps `seconds` after each training batch in a job's first attempt only, so that it is still
    training when SLURM's time-limit warning comes (29-60 s into a 1-minute job: slurmctld checks time
    limits every 30 s); the requeued attempt runs at full speed. Leaves `<attempt> <step>` in `trace` when
    each attempt starts training."""

    def __init__(self, seconds: float, trace: str) -> None:
        self.seconds, self.trace = seconds, trace
        self.attempt = int(os.environ.get("SLURM_RESTART_COUNT", "0"))

    def on_train_start(self, trainer: Trainer, module: LightningModule) -> None:
        with open(self.trace, "a") as f:
            f.write(f"{self.attempt} {trainer.global_step}\n")

    def on_train_batch_end(self, *_: object) -> None:
        if self.attempt == 0:
            time.sleep(self.seconds)


def test_a_run_past_its_time_limit_is_requeued_and_ends_with_an_uninterrupted_runs_metrics(
    partition: str, tmp_path: Path
) -> None:
    folder, trace = tmp_path / "sweep", tmp_path / "trace.txt"
    requeue = [
        "hydra.launcher.timeout_min=1",  # SLURM's smallest time limit
        "hydra.launcher.signal_delay_s=1",  # SIGUSR2 1 s (+ up to 30) before it
        "hydra.launcher.max_num_timeout=1",
        "resume=auto",
    ]
    slow = [f"+callbacks.slow._target_={__name__}.SlowFirstAttempt", "+callbacks.slow.seconds=1"]
    steps = 4 * 240 // 16  # 60 batches: 60 s and more in the first attempt, past its warning
    tests = [str(Path(__file__).parent), str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = os.environ | {"PYTHONPATH": os.pathsep.join(tests)}  # the jobs import SlowFirstAttempt
    overrides = [
        "attention=dot",
        *TINY_RNN,
        *TINY_MODEL,
        *sizes(train=240),
        "trainer.max_epochs=4",
        "optim.scheduler.warmup_steps=0",
        "callbacks.attention_heatmaps=null",
    ]  # dropout on (the decoder's default), so the requeued attempt must restore the generators too
    done = sweep(partition, folder, *requeue, *overrides, *slow, f"+callbacks.slow.trace={trace}", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = results(folder)
    assert run["status"] == "completed", run.get("error")
    assert run["steps"] == steps and run["resumed_from"] == str(folder / "0" / "checkpoints" / "last.ckpt")
    (first, step), (second, resumed_at) = (map(int, line.split()) for line in trace.read_text().splitlines())
    assert (first, step, second) == (0, 0, 1) and 0 < resumed_at < steps  # from the step it stopped at
    (job,) = jobs(folder)
    assert slurm_job(job)["Restarts"] == "1"  # SLURM requeued it once
    log = (folder / ".submitit" / job / f"{job}_0_log.err").read_text()
    assert "Caught signal SIGUSR2" in log and "this job is timed-out" in log  # submitit's decision
    uninterrupted = completed(tmp_path / "uninterrupted", *overrides)  # here, in one attempt
    assert uninterrupted["steps"] == steps and run["metrics"] == uninterrupted["metrics"]


def test_ddp_runs_as_two_slurm_tasks(partition: str, tmp_path: Path) -> None:
    folder = tmp_path / "sweep"
    done = sweep(
        partition, folder, "trainer=ddp_cpu", "attention=dot", *TINY_RNN, *TINY, launcher="slurm_ddp"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = results(folder)
    assert run["status"] == "completed" and run["world_size"] == 2, run.get("error")
    (job,) = jobs(folder)
    assert slurm_job(job)["NumTasks"] == "2"
    logs = [(folder / ".submitit" / job / f"{job}_{task}_log.err").read_text() for task in (0, 1)]
    assert all(f"GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/2" in log for rank, log in enumerate(logs))
