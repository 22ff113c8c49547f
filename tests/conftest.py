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

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

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
def _fresh_joblib_workers() -> Iterator[None]:
    """Loky keeps a joblib sweep's worker processes for the next sweep in this process, with the
    environment and folder they started in: a test's ATTNX_PLUGIN_PATH or working folder would reach
    the next test's jobs. Each test that started them ends them."""
    yield
    loky = sys.modules.get("joblib.externals.loky.reusable_executor")  # imported by a joblib sweep only
    executor = getattr(loky, "_executor", None)  # asking get_reusable_executor() would start one
    if executor is not None:
        executor.shutdown(wait=True)


E2E = Path(__file__).resolve().parent / "e2e"


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
