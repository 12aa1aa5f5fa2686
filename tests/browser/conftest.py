"""Fixtures for the browser tests: notebook servers and headless Chromium, always shut down afterwards.

Nothing here imports playwright at module level: pytest loads this conftest
even where the tests skip because playwright is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from servers import CHROMIUM, CHROMIUM_ARGS, REPO, NotebookServer, start_jupyterlab, stop_server

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NotebookServer]:
    """JupyterLab serving a fresh copy of notebooks/01_quickstart.ipynb."""
    server = start_jupyterlab(tmp_path_factory.mktemp("jupyterlab"), [REPO / "notebooks" / "01_quickstart.ipynb"])
    try:
        yield server
    finally:
        stop_server(server)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless, driven by playwright (never `playwright install`: it downloads browsers)."""
    from playwright.sync_api import sync_playwright

    # The context manager stops playwright's driver process even when launch fails.
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS, timeout=60_000)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser page; every action in it waits at most 30 s."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(30_000)
    context.set_default_navigation_timeout(60_000)
    try:
        yield context.new_page()
    finally:
        context.close()
