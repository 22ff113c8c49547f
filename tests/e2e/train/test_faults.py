"""Faults as clusters and users cause them: signals, kill -9, corrupt files, full disks, two runs in one
folder, untrusted code. One test per fault; each reproduces it for real and checks what attnx now does.

Runs that must be signalled or killed are real processes: forked from this one (`launch`), so they run
`attnx.cli.main` without paying Lightning's import again, and a launcher's workers are spawned afresh.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from test_sweeps import EXPLODING

from attnx import registry
from attnx.cli import main as cli

from helpers.runs import assembled
from helpers.tiny import TINY, TINY_MODEL, TINY_RNN, completed, results, sizes, train

LONG = [*TINY_RNN, *TINY_MODEL, *sizes(train=1000), "trainer.max_epochs=50", "optim.scheduler.warmup_steps=0"]
# LONG's first three epochs: shuffled batches and dropout (the decoder's default), so that a resumed run
# reaches an uninterrupted one's metrics only with the same batches in the same order and the same masks
THREE = [*LONG, "trainer.max_epochs=3", "callbacks.attention_heatmaps=null"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, float]:
    """The val and test metrics of THREE run without interruption."""
    return completed(tmp_path_factory.mktemp("uninterrupted"), *THREE)["metrics"]


def launch(
    args: list[str], output: Path, before: Callable[[], None] | None = None
) -> multiprocessing.Process:
    """`attnx <args>` in a forked child; its exitcode is the CLI's (or -N when killed by signal N).
    What it prints goes to `output`, which `ended` shows when the exit code is wrong."""
    context = multiprocessing.get_context("fork")
    process = context.Process(target=_child, args=(args, output, before), daemon=False)
    process.output = output  # type: ignore[attr-defined]
    process.start()
    return process


def ended(process: multiprocessing.Process, code: int, seconds: float = 60) -> None:
    """Wait for a launched child and assert its exit code, showing what it printed when that is wrong."""
    process.join(seconds)
    output: Path = process.output  # type: ignore[attr-defined]
    assert process.exitcode == code, output.read_text()[-4000:] if output.exists() else "(no output)"


def _child(args: list[str], output: Path, before: Callable[[], None] | None) -> None:
    out = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout = sys.stderr = os.fdopen(out, "w", buffering=1)  # pytest's capture is not a real file
    os.dup2(out, 1)
    os.dup2(out, 2)
    if before is not None:
        before()
    code = 1
    try:
        code = cli(args)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def wait_for(condition: Callable[[], object], seconds: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def record(folder: Path) -> dict:
    path = folder / "results.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[")]  # [..] = log lines
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_sigterm_and_sigint_save_a_checkpoint_record_interrupted_and_resume_to_the_same_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture, uninterrupted: dict[str, float]
) -> None:
    run = tmp_path / "run"
    args = ["train", *THREE, f"hydra.run.dir={run}"]
    first = launch(args, tmp_path / "first.out")
    wait_for((run / "checkpoints" / "last.ckpt").exists, what="the first epoch's checkpoint")
    os.kill(first.pid, signal.SIGTERM)
    ended(first, 143)
    stopped = record(run)
    assert stopped["status"] == "interrupted" and stopped["error"] == "interrupted by SIGTERM"
    saved = torch.load(stopped["checkpoint"], weights_only=True)
    assert saved["global_step"] == stopped["steps"] > 0  # the checkpoint is the moment it stopped
    assert cli(["report", str(run)]) == 0
    assert "0/1 runs completed; 1 interrupted" in capsys.readouterr().out

    second = launch([*args, "resume=auto"], tmp_path / "second.out")
    wait_for(lambda: record(run).get("pid") == second.pid, what="the resumed run's record")
    os.kill(second.pid, signal.SIGINT)
    ended(second, 130)
    assert record(run)["status"] == "interrupted" and record(run)["error"] == "interrupted by SIGINT"

    done = completed(run, *THREE, "resume=auto")
    assert done["resumed_from"].endswith("last.ckpt")
    assert done["steps"] == 3 * 63  # an uninterrupted run's: 3 epochs of ceil(1000 / 16) batches
    assert done["metrics"] == uninterrupted  # to the last digit: the same batches and dropout masks


def test_a_run_killed_with_sigkill_resumes_from_its_last_epoch_to_the_same_metrics(
    tmp_path: Path, uninterrupted: dict[str, float]
) -> None:
    run = tmp_path / "run"
    killed = launch(["train", *THREE, f"hydra.run.dir={run}"], tmp_path / "killed.out")
    wait_for((run / "checkpoints" / "last.ckpt").exists, what="the first epoch's checkpoint")
    os.kill(killed.pid, signal.SIGKILL)  # nothing saved on the way out: last.ckpt is the epoch's end
    ended(killed, -signal.SIGKILL)
    done = completed(run, *THREE, "resume=auto")
    assert done["resumed_from"].endswith("last.ckpt") and done["steps"] == 3 * 63
    assert done["metrics"] == uninterrupted


class SignalAt(Callback):
    """Sends this process `signum` once during `fit`: at the end of training batch `batch` of epoch
    `epoch`, at the end of that epoch (`batch` None: between batches, after its validation), or, with
    `validation`, at the end of that epoch's validation batch `batch`."""

    def __init__(
        self, epoch: int, batch: int | None = None, signum: int = signal.SIGTERM, validation: bool = False
    ) -> None:
        self.epoch, self.batch, self.signum, self.validation = epoch, batch, signum, validation
        self.sent = False

    def _at(self, trainer: Trainer, batch: int | None, validation: bool) -> None:
        here = (trainer.current_epoch, batch, validation) == (self.epoch, self.batch, self.validation)
        if here and not self.sent and trainer.state.fn == "fit" and not trainer.sanity_checking:
            self.sent = True
            os.kill(os.getpid(), self.signum)

    def on_train_batch_end(self, trainer: Trainer, *_: object, batch_idx: int = -1) -> None:
        self._at(trainer, _[-1] if batch_idx < 0 else batch_idx, False)

    def on_validation_batch_end(self, trainer: Trainer, *args: object, **kwargs: object) -> None:
        self._at(trainer, args[3], True)  # (module, outputs, batch, batch_idx)

    def on_train_epoch_end(self, trainer: Trainer, module: LightningModule) -> None:
        self._at(trainer, None, False)


class ValidationHistory(Callback):
    """Appends `<epoch> <val/loss>` to `path` at the end of each validation during `fit`."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_validation_end(self, trainer: Trainer, module: LightningModule) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            with open(self.path, "a") as f:
                f.write(f"{trainer.current_epoch} {float(trainer.callback_metrics['val/loss'])!r}\n")


def signal_at(epoch: int, batch: int | None = None, signum: int = signal.SIGTERM, validation: bool = False):
    """Overrides that add a `SignalAt` callback."""
    fields = {
        "_target_": f"{__name__}.SignalAt",
        "epoch": epoch,
        "batch": "null" if batch is None else batch,
        "signum": int(signum),
        "validation": validation,
    }
    return [f"+callbacks.signal.{key}={value}" for key, value in fields.items()]


# Six batches an epoch, dropout on (the decoder's default): small enough to stop at every kind of point
SMALL = [*THREE[:-1], *sizes(train=96, val=32), "callbacks.attention_heatmaps=null"]


def validations(run: Path) -> list[str]:
    """Overrides that add a `ValidationHistory` writing `<run>.validations`."""
    where = f"+callbacks.history.path={run}.validations"
    return [f"+callbacks.history._target_={__name__}.ValidationHistory", where]


@pytest.fixture(scope="module")
def small_uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, float], str]:
    """SMALL's metrics and validation history without interruption."""
    run = tmp_path_factory.mktemp("small") / "run"
    return completed(run, *SMALL, *validations(run))["metrics"], Path(f"{run}.validations").read_text()


@pytest.mark.parametrize(
    ("at", "stops_at"),
    [
        ({"epoch": 1, "batch": 2}, 6 + 3),  # mid-epoch: at that batch's end
        # before a validation, or inside one: after it and one more batch
        ({"epoch": 1, "batch": 5, "signum": signal.SIGINT}, 12 + 1),
        ({"epoch": 1, "batch": 0, "validation": True}, 12 + 1),
        ({"epoch": 0}, 6 + 1),  # between epochs: at the next batch end
    ],
    ids=["mid-epoch", "before-validation", "in-validation", "between-epochs"],
)
def test_a_run_stopped_anywhere_resumes_to_an_uninterrupted_runs_metrics_and_validations(
    tmp_path: Path, small_uninterrupted: tuple[dict[str, float], str], at: dict, stops_at: int
) -> None:
    metrics, history = small_uninterrupted
    run = tmp_path / "run"
    signum = at.get("signum", signal.SIGTERM)
    assert train(run, *SMALL, *signal_at(**at), *validations(run)) == 128 + signum
    stopped = record(run)
    assert stopped["error"] == f"interrupted by {signal.Signals(signum).name}"
    assert stopped["steps"] == stops_at == torch.load(stopped["checkpoint"], weights_only=True)["global_step"]
    done = completed(run, *SMALL, *validations(run), "resume=auto")
    assert done["resumed_from"] == stopped["checkpoint"] and done["steps"] == 3 * 6
    assert done["metrics"] == metrics  # to the last digit
    assert Path(f"{run}.validations").read_text() == history  # each epoch validated once, none skipped


@pytest.mark.engines  # Inductor compiles both regions, twice
def test_a_compiled_run_stopped_mid_epoch_resumes_to_an_uninterrupted_compiled_runs_metrics(
    tmp_path: Path,
) -> None:
    """With `compile=true` (the rnn encoder's and decoder's regions, dropout on), as eager: a resumed run
    pads its batches as the uninterrupted one did (the checkpoint keeps how wide), so its sums run in
    the same order, and it ends with the same metrics and validations to the last digit."""
    compiled = [*SMALL, "compile=true"]
    whole = tmp_path / "whole"
    expected = completed(whole, *compiled, *validations(whole))
    assert set(expected["compile"]["regions"]) == {"RNNEncoder._recurrence", "RNNDecoder._recurrence"}
    run = tmp_path / "run"
    assert train(run, *compiled, *signal_at(epoch=1, batch=2), *validations(run)) == 128 + signal.SIGTERM
    stopped = record(run)
    done = completed(run, *compiled, *validations(run), "resume=auto")
    assert done["resumed_from"] == stopped["checkpoint"] and done["steps"] == 3 * 6
    assert done["metrics"] == expected["metrics"]
    assert Path(f"{run}.validations").read_text() == Path(f"{whole}.validations").read_text()


def test_a_requeue_signal_is_handed_to_the_handler_before_once_the_run_has_saved_and_recorded(
    tmp_path: Path,
) -> None:
    run, seen = tmp_path / "run", tmp_path / "seen"

    def requeuer() -> None:  # what submitit installs for SIGUSR2: requeue the job, then exit
        def requeue(signum: int, frame: object) -> None:
            saved = (run / "checkpoints" / "last.ckpt").exists()
            seen.write_text(f"{signal.Signals(signum).name} {record(run)['status']} {saved}")
            sys.exit(-1)

        signal.signal(signal.SIGUSR2, requeue)

    usr2_after_first_epoch = signal_at(0, signum=signal.SIGUSR2)
    args = ["train", *LONG, "trainer.max_epochs=3", *usr2_after_first_epoch, f"hydra.run.dir={run}"]
    child = launch(args, tmp_path / "out", before=requeuer)
    child.join(60)
    assert seen.read_text() == "SIGUSR2 interrupted True", (tmp_path / "out").read_text()[-3000:]
    stopped = record(run)
    assert stopped["error"] == "interrupted by SIGUSR2" and stopped["steps"] > 63  # at a batch end
    assert torch.load(stopped["checkpoint"], weights_only=True)["global_step"] == stopped["steps"]


def test_a_second_run_in_a_busy_folder_is_refused_and_a_killed_run_is_listed_as_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    holder = launch(["train", *LONG, f"hydra.run.dir={run}"], tmp_path / "holder.out")
    wait_for(lambda: record(run).get("status") == "running", what="the first run's record")
    assert train(run, *TINY, "attention=dot") == 2
    assert f"is in use by pid {holder.pid}" in one_line(capsys.readouterr().err)
    assert record(run)["pid"] == holder.pid  # nothing of the holder's was overwritten
    assert "attention=dot" not in (run / ".hydra" / "overrides.yaml").read_text()
    assert cli(["report", str(run)]) == 0
    assert "0/1 runs completed; 1 running" in capsys.readouterr().out

    os.kill(holder.pid, signal.SIGKILL)
    holder.join(30)
    assert cli(["report", str(run)]) == 0
    out = capsys.readouterr().out
    assert "0/1 runs completed; 1 stale" in out and f"pid {holder.pid}" in out

    done = completed(run, *TINY_RNN, *TINY, "resume=auto")  # the holder's model: its checkpoint may exist
    assert done["pid"] == os.getpid()
    assert f"from pid {holder.pid}" in (run / "train.log").read_text()  # the stale lock, taken over


@pytest.mark.engines  # joblib's process pool: its two workers import Lightning afresh
def test_a_sweep_killed_with_sigkill_stops_its_workers_and_resumes_to_uninterrupted_runs_metrics(
    tmp_path: Path, uninterrupted: dict[str, float]
) -> None:
    sweep = tmp_path / "sweep"
    joblib = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    # two seeds of one model: runs of equal speed, so neither can finish before the other's first epoch
    # (with dot against additive, dot once did); distinct, so a resume from the other's checkpoint shows
    seeds = "seed=0,1"
    sweeping = ["train", "-m", *THREE, *joblib, seeds, f"hydra.sweep.dir={sweep}"]
    main = launch(sweeping, tmp_path / "main.out")
    jobs = [sweep / "0", sweep / "1"]
    first_epoch = [j / "checkpoints" / "last.ckpt" for j in jobs]
    wait_for(lambda: all(p.exists() for p in first_epoch), 120, "both runs' first epoch")
    workers = [record(j)["pid"] for j in jobs]
    os.kill(main.pid, signal.SIGKILL)
    main.join(30)

    def gone() -> bool:
        return not any(Path(f"/proc/{pid}").exists() for pid in workers)

    wait_for(gone, 60, "the orphaned workers to exit")
    assert [record(j)["status"] for j in jobs] == ["interrupted", "interrupted"]
    assert all(Path(record(j)["checkpoint"]).exists() for j in jobs)

    assert train(sweep, *THREE, *joblib, seeds, "resume=auto", sweep=True) == 0
    resumed = [record(j) for j in jobs]
    assert all(r["resumed_from"] and r["steps"] == 3 * 63 for r in resumed)
    seed_1 = completed(tmp_path / "seed_1", *THREE, "seed=1")["metrics"]
    assert [r["metrics"] for r in resumed] == [uninterrupted, seed_1]  # seed 0 is THREE's
    assert seed_1 != uninterrupted


def test_a_full_disk_fails_the_run_and_leaves_no_partial_checkpoint(tmp_path: Path) -> None:
    def small_disk() -> None:  # a file-size limit stands in for a full disk: writes past it fail with EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, 60_000))

    run = tmp_path / "run"
    child = launch(["train", *TINY, f"hydra.run.dir={run}"], tmp_path / "child.out", before=small_disk)
    ended(child, 1, 120)
    failed = record(run)
    assert failed["status"] == "failed" and "could not write checkpoint" in failed["error"]
    assert "File too large" in failed["error"]
    assert list((run / "checkpoints").iterdir()) == []  # neither a partial .ckpt nor a .tmp


def test_a_read_only_checkpoint_folder_fails_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = tmp_path / "run" / "checkpoints"
    folder.mkdir(parents=True)
    if os.geteuid() == 0:  # root writes through permission bits, not through the immutable attribute
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode:
            pytest.skip("chattr +i is not available on this filesystem, and root ignores chmod")
    else:
        folder.chmod(0o555)
    try:
        assert train(tmp_path / "run", *TINY) == 1
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
    assert "is not writable" in one_line(capsys.readouterr().err)
    failed = record(tmp_path / "run")
    assert failed["status"] == "failed" and "is not writable" in failed["error"]
    assert "steps" not in failed  # it never trained


@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("two_epochs")
    completed(run, *TINY, "trainer.max_epochs=2")
    return run


def _random_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4096] = os.urandom(4096)
    path.write_bytes(bytes(data))


def _non_finite_without_checksum(path: Path) -> None:
    checkpoint = torch.load(path, weights_only=True)
    next(iter(checkpoint["state_dict"].values())).fill_(float("nan"))
    torch.save(checkpoint, path)
    path.with_name(path.name + ".sha256").unlink()  # as an older attnx left it


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_random_bytes, "checksum mismatch"),
        (lambda p: p.write_bytes(p.read_bytes()[:5000]), "checksum mismatch"),
        (lambda p: p.write_bytes(b""), "checksum mismatch"),
        (_non_finite_without_checksum, "non-finite values in its weights"),
    ],
    ids=["random-bytes", "truncated", "empty", "nan-weights-no-checksum"],
)
def test_resume_falls_back_to_the_newest_good_checkpoint(
    tmp_path: Path, two_epochs: Path, damage: Callable[[Path], None], reason: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(two_epochs, run)
    (best,) = (run / "checkpoints").glob("epoch*.ckpt")
    time.sleep(0.01)
    damage(run / "checkpoints" / "last.ckpt")
    done = completed(run, *TINY, "trainer.max_epochs=3", "resume=auto")
    assert done["resumed_from"] == str(best)
    (skipped,) = done["resume_skipped"]
    assert "last.ckpt" in skipped and reason in skipped
    assert "resume=auto: skipped" in (run / "train.log").read_text()
    assert all(torch.isfinite(torch.tensor(v)) for v in done["metrics"].values())


def test_a_non_finite_loss_fails_the_run_at_its_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    plugin = tmp_path / "plugins" / "diverging.py"
    plugin.parent.mkdir()
    plugin.write_text(
        "from attnx import register_score\n"
        "from attnx.nn.scores import DotScore\n\n"
        "@register_score('diverging_test')\n"
        "class DivergingScore(DotScore):\n"
        "    calls = 0\n\n"
        "    def forward(self, query, keys):\n"
        "        if self.training and len(query) > 4:  # a run's batch, not the kit's 1-3 rows\n"
        "            self.calls += 1\n"
        "        scores = super().forward(query, keys)\n"
        "        return scores * float('nan') if self.calls > 20 else scores\n"
    )
    monkeypatch.setenv("ATTNX_PLUGIN_PATH", str(plugin.parent))
    run = tmp_path / "run"
    assert train(run, *TINY, "attention=dot", "score=diverging_test") == 1
    assert "non-finite loss at step" in one_line(capsys.readouterr().err)
    failed = record(run)
    assert failed["status"] == "failed" and "NonFiniteLoss: non-finite loss at step" in failed["error"]
    assert not list((run / "checkpoints").glob("*.ckpt"))  # the first epoch never ended


class _RunsCode:
    """Unpickling this creates a folder: a stand-in for arbitrary code in a checkpoint."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.mkdir, (str(self.marker),))


def test_a_checkpoint_that_holds_code_is_refused_even_when_the_environment_allows_pickles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    marker = tmp_path / "code-ran"
    evil = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "payload": _RunsCode(marker)}, evil)

    assert train(tmp_path / "a", *TINY, f"ckpt_path={evil}") == 2
    assert "refused, it holds code" in one_line(capsys.readouterr().err)
    # resume=auto meets the same file as last.ckpt: skipped, and the run starts afresh
    (tmp_path / "b" / "checkpoints").mkdir(parents=True)
    shutil.copy(evil, tmp_path / "b" / "checkpoints" / "last.ckpt")
    done = completed(tmp_path / "b", *TINY, "resume=auto")
    assert done["resumed_from"] is None and "refused" in done["resume_skipped"][0]
    assert not marker.exists()


def test_plugins_in_an_untrusted_launch_folder_are_not_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "anything.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    assert cli(["plugins"]) == 0
    assert "to use it: ATTNX_PLUGIN_PATH=plugins" in capsys.readouterr().err
    assert not marker.exists()

    monkeypatch.setenv("ATTNX_PLUGIN_PATH", "plugins")
    with pytest.raises(SystemExit):  # Hydra's --help exits after printing
        cli(["train", "--help"])
    assert not marker.exists()  # help imports no plugin, even a trusted one
    assert cli(["plugins"]) == 0
    assert marker.exists()


def test_a_sweep_with_a_failed_run_exits_non_zero_with_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "exploding.py").write_text(EXPLODING)  # valid config, fails in training
    monkeypatch.setenv("ATTNX_PLUGIN_PATH", str(tmp_path / "plugins"))
    sweep = tmp_path / "sweep"
    assert train(sweep, *TINY, "attention=dot", "score=dot,exploding", sweep=True) == 1
    assert f"1 completed, 1 failed: see {sweep / '1' / 'results.json'}" in capsys.readouterr().out
    assert [r["status"] for r in results(sweep)] == ["completed", "failed"]


def test_under_slurm_the_requeue_signal_is_left_to_submitit(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    from attnx.lit.checkpoints import VerifiedCheckpointIO

    registry.load_all()
    for key, value in {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "attnx", "SLURM_JOB_ID": "7"}.items():
        monkeypatch.setenv(key, value)
    _, _, trainer = assembled([*TINY, "paths.output_dir=unused"])
    environment = trainer._accelerator_connector.cluster_environment
    assert isinstance(environment, SLURMEnvironment) and not environment.auto_requeue
    assert isinstance(trainer.strategy.checkpoint_io, VerifiedCheckpointIO)
