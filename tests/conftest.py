"""Shared test setup: one torch thread (small models run far faster that way on 2 shared cores), a fixed
torch seed per test, torch's global flags restored after each test, and `gpu` tests skipped without one.

The folders are the markers: every test under `e2e/` (the real CLI, a Lightning fit, a subprocess) is
marked `e2e` here, so `make test-fast` (-m "not e2e and not slow") cannot pick one up by a forgotten
decorator; a test elsewhere may not mark itself `e2e`. `unit/` mirrors the package, `plugins/` holds the
shipped plugins' tests, `helpers/` what tests share (the tiny-run overrides in `helpers/tiny.py`; the
browser tests' `page` fixture in `helpers/browser.py`; `helpers/cluster.py`, `plugins.py`, `real_data.py`
and `wandb.py` hold fixtures too: plugins here, so that any test can ask for them).
Markers are registered in pyproject.toml.
"""

import hashlib
import itertools
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from _pytest.mark.expression import Expression  # pytest's -m parser (no public name)

# their fixtures, for any test
pytest_plugins = [
    "helpers.browser",
    "helpers.cluster",
    "helpers.plugins",
    "helpers.real_data",
    "helpers.wandb",
]

torch.set_num_threads(1)
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _torch_flags() -> Iterator[None]:
    """A Lightning Trainer (deterministic: true) switches deterministic algorithms on for the whole
    process, and a run sets its `threads`: no test may inherit them from the one before."""
    deterministic, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    yield
    torch.use_deterministic_algorithms(deterministic)
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _own_run_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test's `store=auto` (every compare's default) is a store of its own: runs stored by one test
    must not stand in for the runs another trains, nor land in the user's cache. A folder named by the test,
    made only by what writes there (`mktemp` for each of a thousand tests would scan the folder each time)."""
    name = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:16]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "caches" / name))


@pytest.fixture(autouse=True)
def _fresh_joblib_workers() -> Iterator[None]:
    """Loky keeps a joblib sweep's worker processes for the next sweep in this process, with the
    environment and folder they started in: a test's ATTNX_PLUGIN_PATH or working folder would reach
    the next test's jobs. Each test that started them ends them."""
    yield
    loky = sys.modules.get("joblib.externals.loky.reusable_executor")  # imported by a joblib sweep only
    executor = getattr(loky, "_executor", None)  # asking get_reusable_executor() would start one
    if executor is not None:
        executor.shutdown(wait=True)


@pytest.fixture(autouse=True)
def _inductor_cache_folder() -> Iterator[None]:
    """A sweep run in this process points Inductor's on-disk cache at the sweep's folder for the rest of
    the process (attnx.train.compile_cache): every later compile, in this test or in a subprocess it
    starts, would begin from that empty folder, a minute of C++ each. Each test starts with the folder
    the session has: Inductor's own (per user, in the temp folder), warm from earlier runs."""
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    yield
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR") != before:
        if before is None:
            del os.environ["TORCHINDUCTOR_CACHE_DIR"]
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = before
        inductor = sys.modules.get("torch._inductor.utils")
        if inductor is not None:  # its memoised folder too
            inductor.clear_caches()


E2E = Path(__file__).resolve().parent / "e2e"


def selects_no_e2e(markexpr: str) -> bool:
    """Whether `-m markexpr` deselects every e2e test whatever other marks it has: false for e2e plus
    every subset of the other names it mentions ("not e2e and not slow": yes; "not slow", "slurm": no)."""
    try:
        expression = Expression.compile(markexpr)
    except SyntaxError:
        return False  # pytest reports it
    others = sorted(set(re.findall(r"[A-Za-z_][\w.]*", markexpr)) - {"and", "or", "not", "e2e"})
    for n in range(len(others) + 1):
        for marks in map(set, itertools.combinations(others, n)):
            if expression.evaluate(lambda name, marks=marks, **_: name == "e2e" or name in marks):
                return False
    return True


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """`make test-fast` does not even import tests/e2e/: its modules import Lightning's fit machinery,
    scipy and every command, seconds of a run that then deselects them all."""
    if collection_path == E2E and config.option.markexpr and selects_no_e2e(config.option.markexpr):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.e2e)
        elif item.get_closest_marker("e2e"):
            raise pytest.UsageError(f"{item.nodeid} is marked e2e outside tests/e2e/: move it there instead")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: torch.cuda.is_available() is false")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """pytest-randomly's seed, also under -q (which hides the header where it prints it)."""
    seed = getattr(config.option, "randomly_seed", None)
    if seed is not None:
        terminalreporter.write_line(f"random order: repeat it with -p randomly --randomly-seed={seed}")
