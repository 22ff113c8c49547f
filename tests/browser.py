"""Headless Chromium for the `browser` tests: Debian's `chromium` (`apt-get install chromium`, which
`.ci/run` does as root) driven by Playwright's Python package. Playwright's own browser download needs a
network, so the system browser is launched by path. A test that asks for `page` is skipped, with the
reason, where either is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
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
    """The sources of the page's images that did not load (a decoded image has a natural width)."""
    return page.evaluate(
        "Array.from(document.images)"
        ".filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 80))"
    )
