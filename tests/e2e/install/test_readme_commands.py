"""The README is executable: every command line it shows, and every shipped experiment, is run or composed
here, so that a command the documentation promises cannot break unnoticed (issue 29: every run shorter than
one epoch failed, and no test ran one).

How each line is checked (readme_lines.py extracts them; a new line is picked up without editing this file):
- `attnx train` lines, and `attnx train -m experiment=NAME` for every conf/experiment/*.yaml: composed with
  `--cfg job` (and every other value of their sweeps composed as the CLI composes it), then **run for real**,
  stopped after `trainer.max_steps` shorter than one epoch, on tiny task sizes and widths
  (readme_lines.tiny): exit 0, as many `results.json` as runs, each `completed` with test metrics. A sweep
  runs through its own sweeper and launcher, cut to at most MAX_SWEEP jobs (readme_lines.shrunk).
- `$ attnx ...` lines of text blocks (bad input): run as the real CLI in a fresh interpreter; they exit 2
  and print the line the README shows.
- `attnx report` lines: run for real on tiny sweeps of the README's own train lines (REPORT_INPUTS), made
  once per session: a train line run at the same size for its own test is the same sweep (SmallRuns).
- `attnx compare` lines: composed only, by compare's own checks before it trains (the suite, the
  protocol, the candidate and the baseline on every task); a compare is dozens of runs, which
  tests/e2e/compare/test_compare.py runs end to end on a tiny suite, and checks every classic arm on every
  conf/suite/*.yaml.
- `make` lines: `make -n TARGET`, the target exists.
- Sample outputs (`text` blocks without a `$ command`, generated from a results file: SAMPLES): the command
  that prints it runs small here, and prints the same table columns, a cell of the same kind (a number or
  not) in each, as many rows, and the same summary line but for its numbers and folders; not its timings.
- COMPOSED_ONLY: train lines that could run here but are composed only, with the reason; SKIPPED: lines
  that cannot run here, with the reason (their `attnx train` lines are still composed).
A README line that none of these takes fails `test_every_readme_line_is_run_or_listed`.

The other commands run in this process (Lightning is imported once), from a new folder outside the
checkout (the `launch` fixture), with one torch thread and a data cache of the session's own.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from attnx import registry
from attnx.cli import main as cli
from attnx.config.compose import compose, covering_jobs

from helpers.readme_lines import (
    MAX_STEPS,
    MAX_SWEEP,
    REPO,
    Line,
    flags,
    jobs,
    multirun,
    overrides,
    pinned,
    planned,
    readme_lines,
    sample_outputs,
    shrunk,
    sweeps,
    tiny,
    train_lines,
    varying,
)

ATTNX = [sys.executable, "-m", "attnx.cli"]  # the real CLI in a fresh interpreter

SLURM = (
    "needs a SLURM cluster; tests/e2e/train/test_slurm.py submits sweeps to one, or to "
    "scripts/slurm-local.sh's"
)
SKIPPED = {
    "attnx train -m hydra/launcher=slurm hydra.launcher.partition=NAME resume=auto "
    "attention=additive,dot": SLURM,
    "attnx train -m hydra/launcher=slurm hydra.launcher.partition=gpu hydra.launcher.timeout_min=240 "
    "hydra.launcher.gpus_per_node=1 trainer=gpu resume=auto attention=additive,dot,multi_head": SLURM,
    "attnx train -m hydra/launcher=slurm_ddp hydra.launcher.partition=gpu hydra.launcher.timeout_min=240 "
    "trainer=ddp trainer.devices=4 trainer.num_nodes=2 hydra.launcher.gpus_per_node=4 resume=auto "
    "attention=additive,dot": SLURM,
    "attnx train -m hydra/launcher=slurm hydra.launcher.partition=local hydra.launcher.mem_gb=1 "
    "attention=none,additive,dot": SLURM,
    "sudo scripts/slurm-local.sh start": "installs and starts SLURM as root (.ci/run does, for test_slurm)",
    "sudo scripts/slurm-local.sh stop": "stops the cluster that start started",
    "attnx train trainer=ddp": "needs 2 CUDA GPUs (NCCL); trainer=ddp_cpu, the same config, runs here",
    "attnx dashboard 'multirun/<date>/<time>'": "serves until Ctrl+C; tests/e2e/dashboard/test_dashboards.py "
    "serves a tiny sweep and opens its URL in a browser",
    "attnx sync 'multirun/<date>/<time>'": "needs a W&B login and W&B's server",
    "attnx sync 'multirun/<date>/<time>' --dry-run": "needs offline W&B runs (logger=wandb, seconds each to "
    "start); tests/e2e/dashboard/test_dashboards.py runs it on a tiny W&B sweep",
}
# `attnx train` lines that can run here but are composed only, with the reason
COMPOSED_ONLY = {
    "attnx train trainer=ddp_cpu trainer.devices=4": "4 processes on the 2 cores tests have take 20 s; "
    "trainer=ddp_cpu with 2 runs here, and tests/e2e/train/test_ddp.py compares it with one process",
    "attnx train -m hydra/launcher=submitit_local attention=additive,dot": "each job is a new Python "
    "process (25 s here); tests/e2e/train/test_sweeps.py runs a submitit_local sweep",
}
# the sweeps the README's `attnx report` lines read, made by running these README lines small
REPORT_INPUTS = {
    "multirun/zoology_mqar/<date>": "attnx train -m experiment=zoology_mqar",
    "multirun/zoology_state/<date>": "attnx train -m experiment=zoology_state",
    "multirun/2026-11-29/12-00-00": "attnx train -m experiment=bahdanau_length",
    "multirun/a": "attnx train -m attention=none,fixed_c,additive,dot,multi_head task=reverse "
    "task.max_len=10,30,50",
    "multirun/b": "attnx train -m task=reverse task.min_len=30 task.max_len=40 attention=fixed_c,additive",
}
BENCH_CSV = "outputs/bench/bench.csv"  # made by a tiny `attnx bench` of the mechanisms the sweeps compare
# each sample output (by its results block) -> the README train line whose sweep `attnx report` prints it
SAMPLES = {"quickstart.json output": "attnx train -m experiment=quickstart"}  # `make run`
CHECKED = {("attnx", "train"), ("attnx", "report"), ("attnx", "compare"), ("attnx", "store"), ("make",)}

LINES = readme_lines()
TRAIN = train_lines()
RUN = [line for line in TRAIN if str(line) not in {*SKIPPED, *COMPOSED_ONLY}]


def by(command: tuple[str, ...]) -> list[Line]:
    """The README's lines of one command, but for bad-input examples and SKIPPED lines."""
    return [x for x in LINES if x.command == command and x.expected is None and str(x) not in SKIPPED]


def test_every_readme_line_is_run_or_listed() -> None:
    assert len(TRAIN) >= 30 and by(("attnx", "report")) and by(("attnx", "compare"))  # the extraction works
    unchecked = [str(line) for line in LINES if line.command not in CHECKED and line.expected is None]
    assert not set(unchecked) - set(SKIPPED), "a README line neither run nor listed in SKIPPED"
    listed = {*SKIPPED, *COMPOSED_ONLY}
    assert not listed - {str(line) for line in LINES}, "a table names a line the README no longer shows"


@pytest.fixture
def launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder commands start from: a new one outside the checkout, as a user's project folder, with no
    plugin folder (the README's plugins ship with the package) and no ATTNX_PLUGIN_PATH."""
    folder = tmp_path / "launch"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.delenv("ATTNX_PLUGIN_PATH", raising=False)
    registry.load_all()
    return folder


@pytest.fixture(scope="session")
def data(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A data cache of this session's own, never the user's (real-data tasks download into it once)."""
    folder = tmp_path_factory.mktemp("attnx_data")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATTNX_DATA", str(folder))
        yield folder


def first_job(line: Line) -> DictConfig:
    """The config of the line's first covering job, with Hydra's (its sweeper's params, its mode)."""
    parsed = OverridesParser.create().parse_overrides(overrides(line))
    return job_config(covering_jobs(parsed)[0])


def job_config(job: list[str]) -> DictConfig:
    return compose(job, return_hydra_config=True, require_values=False)


def attnx(*argv: str) -> tuple[int, str, str]:
    """An attnx command in this process: its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("line", TRAIN, ids=str)
def test_train_line_composes(line: Line, launch: Path) -> None:
    """`attnx train ... --cfg job` prints the first job's config (Hydra forbids `--cfg` with `-m`), and every
    other value of the line's sweeps, its experiment's included, composes as the CLI composes it. A line
    that inspects the config itself (`--info defaults`) runs as written."""
    cfg = first_job(line)
    first, *others = covering_jobs(OverridesParser.create().parse_overrides(sweeps(line, cfg)))
    inspect = [f for f in flags(line) if f not in ("-m", "--multirun")]
    code, out, err = attnx("train", *pinned(line, cfg), *first, *(inspect or ["--cfg", "job"]))
    assert code == 0, err
    assert inspect or "task" in yaml.safe_load(out), out
    for job in others:
        job_config([*pinned(line, cfg), *job])  # a ConfigError names the override


class SmallRuns:
    """Each README train line run small once per session (per xdist worker): the sweeps the report lines
    read are train lines that test_train_line_runs_shorter_than_one_epoch runs too, mostly at the same
    size, so each is trained once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: dict[tuple[str, ...], tuple[int, Path]] = {}  # arguments -> exit code, folder

    def __call__(self, line: Line, keep: Collection[str] = ()) -> tuple[int, list[dict], int, Path]:
        """Run the line small (`small`), or find it run: (its exit code, every results.json record, how
        many runs it makes, its folder)."""
        argv, where, expected = small(line, keep)
        if argv not in self.made:
            out = self.root / str(len(self.made))
            self.made[argv] = attnx(*argv, f"{where}={out}")[0], out
        code, out = self.made[argv]
        return code, records(out), expected, out


@pytest.fixture(scope="session")
def small_runs(tmp_path_factory: pytest.TempPathFactory, data: Path) -> SmallRuns:
    return SmallRuns(tmp_path_factory.mktemp("readme_runs"))


def small(line: Line, keep: Collection[str] = ()) -> tuple[tuple[str, ...], str, int]:
    """How to run the line small: (its arguments, the key of the folder it writes, how many runs it
    makes). A sweep runs as one sweep of at most MAX_SWEEP jobs (readme_lines.shrunk), on the tiny
    overrides every one of its jobs takes."""
    cfg = first_job(line)
    if not multirun(line, cfg):
        return ("train", *overrides(line), *tiny(line, cfg)), "hydra.run.dir", 1
    if "n_trials" in " ".join(tiny(line, cfg)):  # Optuna: its trials are the sweep
        return ("train", *flags(line), *overrides(line), *tiny(line, cfg)), "hydra.sweep.dir", 1
    plan = planned(cfg)
    if plan is not None:  # an inline plan: its jobs (tiny cuts it to MAX_SWEEP) are the sweep
        runs = min(len(plan), MAX_SWEEP)
        return ("train", *flags(line), *overrides(line), *tiny(line, cfg)), "hydra.sweep.dir", runs
    sweep = shrunk(line, cfg, keep)
    smalls = [tiny(line, job_config([*pinned(line, cfg), *job])) for job in jobs(sweep)]
    common = [o for o in smalls[0] if all(o in small for small in smalls)]
    swept = [f"{key}={','.join(values)}" for key, values in sweep.items()]
    return ("train", *flags(line), *pinned(line, cfg), *swept, *common), "hydra.sweep.dir", len(smalls)


def records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.rglob("results.json"))]


def needs_vader(line: Line) -> bool:
    task = first_job(line).task.name
    return registry.registry("task").entry(task).cls.__module__ == "attnx.tasks.vader"


def engine(line: Line) -> Any:
    """A line that trains with DDP's processes (`trainer=ddp_cpu`) belongs to `make test-engines`."""
    ddp = any(o.startswith("trainer=ddp") for o in overrides(line))
    return pytest.param(line, marks=pytest.mark.engines) if ddp else line


@pytest.mark.parametrize("line", [engine(line) for line in RUN if not set(flags(line)) - {"-m"}], ids=str)
def test_train_line_runs_shorter_than_one_epoch(line: Line, launch: Path, small_runs: SmallRuns) -> None:
    if needs_vader(line):
        vader_or_skip()
    code, records, expected, _ = small_runs(line)
    assert code == 0 and len(records) == expected, [r.get("error") for r in records]
    for record in records:
        assert record["status"] == "completed", record.get("error")
        assert any(key.startswith("test/") for key in record["metrics"]), record["metrics"]
        if not any(o.startswith("trainer.max_steps=") for o in overrides(line)):
            assert record["steps"] == MAX_STEPS


def vader_or_skip() -> None:
    from attnx.tasks.cache import DataUnavailableError, pip_sdist
    from attnx.tasks.vader import ARCHIVE, REQUIREMENT

    try:
        pip_sdist(REQUIREMENT, ARCHIVE)
    except DataUnavailableError as error:
        pytest.skip(f"the package index cannot be reached: {error}")


@pytest.mark.parametrize("line", [line for line in LINES if line.expected], ids=str)
def test_shown_error_is_what_the_command_prints(line: Line, launch: Path) -> None:
    """In a fresh interpreter, as a user runs it: the lists of what exists that these errors print would
    otherwise include the plugins other tests registered in this process."""
    done = subprocess.run([*ATTNX, *line.words[1:]], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip() == line.expected


@pytest.mark.parametrize("line", by(("attnx", "report")), ids=str)
def test_report_line_runs_on_tiny_sweeps(line: Line, launch: Path, small_runs: SmallRuns) -> None:
    """Each sweep the line reads is its README train line run small, two values of each key the report
    plots or selects by; its bench CSV a tiny `attnx bench` of the mechanisms those sweeps compare."""
    argv = list(line.words[1:])
    pairs = zip(argv, argv[1:])
    read = {key for flag, keys in pairs if flag in ("--x", "--panel", "--select") for key in keys.split(",")}
    for i, word in enumerate(argv):
        if word in REPORT_INPUTS:
            train = next(t for t in TRAIN if str(t) == REPORT_INPUTS[word])
            code, records, _, made = small_runs(train, keep=varying(train, first_job(train), read))
            assert code == 0 and records
            argv[i] = str(made)
        elif word == BENCH_CSV:
            small = ["--lengths", "8", "--dim", "16", "--repeats", "1", "--warmup", "0", "--encoder", ""]
            mechanisms = ["--attention", "fixed_c,additive,dot"]
            assert attnx("bench", *mechanisms, *small, "--out", str(Path(word).parent))[0] == 0
    code, out, err = attnx(*argv)
    assert code == 0, err
    assert (launch / "comparison" / "report.html").exists() if "--out" in argv else "runs completed" in out


@pytest.mark.parametrize("line", by(("attnx", "compare")), ids=str)
def test_compare_line_composes_every_arm(line: Line, launch: Path) -> None:
    assert_compare_composes(list(line.words[2:]))


def assert_compare_composes(argv: list[str]) -> None:
    """What `attnx compare` checks before it trains, for the line's candidate and the baseline: the suite
    and protocol, and both arms composed and validated on every task of the suite, the candidate running
    on at least one. (Every classic arm on every shipped suite: tests/e2e/compare/test_compare.py.)"""
    from attnx.compare.cli import Arm, candidate_arm, check_arms, compose_compare, split

    request = split(argv)
    cfg = compose_compare(request.compare)
    candidate = candidate_arm(cfg, request.candidate)
    baseline = Arm(cfg.baseline, (f"attention={cfg.baseline}",))
    hosted, _, _ = check_arms(cfg, [baseline, candidate], request.runs)
    assert any(candidate in task_arms for task_arms in hosted.values())


@pytest.mark.parametrize("line", by(("attnx", "store")), ids=str)
def test_store_line_runs(line: Line, launch: Path) -> None:
    """On the user's store (this test's own cache folder), as written."""
    code, out, err = attnx(*line.words[1:])
    assert code == 0 and out.startswith("run store "), err


@pytest.mark.parametrize("line", by(("make",)), ids=str)
def test_make_line_names_a_target(line: Line) -> None:
    done = subprocess.run(["make", "-n", "-C", str(REPO), *line.words[1:]], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_every_sample_output_is_checked() -> None:
    assert sample_outputs() and not [key for key, _ in sample_outputs() if key not in SAMPLES]


@pytest.mark.parametrize(("key", "sample"), sample_outputs(), ids=lambda v: str(v)[:30])
def test_sample_output_has_the_shape_the_command_prints(
    key: str, sample: str, launch: Path, small_runs: SmallRuns
) -> None:
    """A tiny run validates too little to draw every figure: its figures are some of the sample's."""
    train = next(line for line in TRAIN if str(line) == SAMPLES[key])
    code, _, _, made = small_runs(train)
    assert code == 0
    code, printed, err = attnx("report", str(made))
    assert code == 0, err
    (*table, files), (*shown, shown_files) = shape(printed), shape(sample)
    assert table == shown, printed
    assert {f for f in files if not f.endswith(".png")} == {f for f in shown_files if not f.endswith(".png")}
    assert set(files) <= set(shown_files), printed


def shape(output: str) -> tuple[list[str], list[tuple[bool, ...]], str, list[str]]:
    """An `attnx report` output's table header, whether each row's cells are numbers, and its summary line
    with numbers as N and the files it wrote by name."""
    lines = output.strip().splitlines()
    cells = [[cell.strip() for cell in line.strip(" |").split("|")] for line in lines if line.startswith("|")]
    numbers = [tuple(bool(re.fullmatch(r"[-+]?[\d,]*\.?\d+", cell)) for cell in row) for row in cells[2:]]
    outcome, _, written = lines[-1].partition("; wrote ")
    return cells[0], numbers, re.sub(r"\d+", "N", outcome), sorted(Path(p).name for p in written.split(", "))
