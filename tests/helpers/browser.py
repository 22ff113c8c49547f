"""Headless Chromium for the `browser` tests: Debian's `chromium` (`apt-get install chromium`, which
`.ci/run` does as root) driven by Playwright's Python package. Playwright's own browser download needs a
network, so the system browser is launched by path. A test that asks for `page` is skipped, with the
reason, where either is missing. `serve` runs the web server a test opens, on a `free_port()`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

# Without the background-networking flags Chromium keeps dialling Google's hosts, which a closed
# network refuses; --no-sandbox because CI runs as root.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str | None:
    """The browser to drive: $ATTNX_CHROMIUM, else `chromium` (Debian) or `chromium-browser` on PATH."""
    return os.environ.get("ATTNX_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def page() -> Iterator[Any]:
    """A fresh Playwright page in headless Chromium, 1280×900."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs playwright: pip install 'attnx[dev]'")
    path = chromium()
    if path is None:
        pytest.skip("needs Chromium: apt-get install chromium (or set ATTNX_CHROMIUM to a Chromium binary)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, args=ARGS)
        try:
            yield browser.new_page(viewport={"width": 1280, "height": 900})
        finally:
            browser.close()


def broken_images(page: Any) -> list[str]:
    """The sources of the page's images that did not load (a decoded image has a natural width), those
    inside open shadow roots included (Playwright's CSS locators pierce them; `document.images` does not)."""
    return page.locator("img").evaluate_all(
        "images => images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 80))"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS's pick)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def serve(command: list[str], url: str, timeout: float = 120.0) -> Iterator[Callable[[], str]]:
    """Run the web server `command` until the block ends, entering once `url` answers; yields a function
    returning what it has printed. It runs in a session of its own, which is ended as a whole (a server's
    helper processes included); if it exits or never answers, the failure quotes what it printed."""
    with tempfile.TemporaryFile() as output:
        server = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)

        def printed() -> str:
            output.seek(0)
            return output.read().decode(errors="replace")

        try:
            deadline = time.monotonic() + timeout  # a generous bound on start-up, not a speed check
            while True:
                assert server.poll() is None, (
                    f"{command} exited with {server.returncode}:\n{printed()[-2000:]}"
                )
                try:
                    urllib.request.urlopen(url, timeout=5).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, f"{url} did not answer:\n{printed()[-2000:]}"
                    time.sleep(0.2)
            yield printed
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
