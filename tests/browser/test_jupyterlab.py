"""The quick-start notebook, run in JupyterLab in a real (headless) Chromium, as a person would.

Checks what the page shows: no error output, one summary of the run in the
dashboard's place (chart drawn, under one screen at 1400x900, readable in
the light and the dark theme, the chart a box in neither), and a model that
learned something. Screenshots of both themes are saved under build/ for
people to look at; the chart's own, under the test's tmp_path.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip(
    "playwright.sync_api",
    reason="needs playwright: `pip install playwright` (never `playwright install`; the test drives Debian's chromium)",
)
pytest.importorskip("jupyterlab", reason="needs JupyterLab 4: `pip install 'jupyterlab>=4,<5'`")

from dashboard_checks import (
    assert_chart_drawn,
    assert_chart_matches_page,
    assert_fits_one_screen,
    assert_model_learned,
    assert_text_contrast,
    the_summary,
)
from lab_page import open_notebook, run_all_cells, save_notebook, screenshot_whole_notebook
from playwright.sync_api import Locator, Page, expect
from servers import CHROMIUM, REPO, NotebookServer

if not CHROMIUM.exists():
    pytest.skip(f"needs Chromium at {CHROMIUM}: `apt-get install chromium`", allow_module_level=True)

NOTEBOOK = "01_quickstart.ipynb"
SCREENSHOT = REPO / "build" / "browser_quickstart.png"
DARK_SCREENSHOT = REPO / "build" / "browser_quickstart_dark.png"
RUN_ALL_MS = 150_000  # the %%tpu_train cell takes 15-30 s on XLA:CPU; the rest a few seconds
FAILURE_TEXT = re.compile(r"Traceback \(most recent call last\)|UsageError: ")


def test_quickstart_runs_in_jupyterlab(jupyterlab: NotebookServer, page: Page, tmp_path: Path) -> None:
    expect.set_options(timeout=15_000)
    panel = open_notebook(page, jupyterlab.notebook_url(NOTEBOOK), NOTEBOOK)
    try:
        run_all_cells(page, timeout_ms=RUN_ALL_MS)
    finally:
        # Also after a timeout: the picture is the quickest way to see what went wrong.
        screenshot_whole_notebook(page, panel, SCREENSHOT)

    assert_every_cell_ran_without_error(panel, jupyterlab, page)
    outputs = panel.locator(".jp-OutputArea-output")
    summary = the_summary(outputs, page)
    assert_chart_drawn(summary, page)
    assert_model_learned(outputs)
    page.set_viewport_size({"width": 1400, "height": 900})
    summary.scroll_into_view_if_needed()
    assert_fits_one_screen(panel.locator(".jp-Cell-outputArea").filter(has=page.locator(".tpu-nb-summary")))
    assert_text_contrast(summary)
    check_chart_on_page(summary, tmp_path / "chart_light.png", "light")

    page.get_by_role("menuitem", name="Settings", exact=True).click()
    page.locator(".lm-Menu-item", has_text=re.compile(r"^Theme$")).hover()
    page.get_by_role("menuitem", name="JupyterLab Dark", exact=True).click()
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", "false")
    screenshot_whole_notebook(page, panel, DARK_SCREENSHOT)
    assert_text_contrast(summary)
    check_chart_on_page(summary, tmp_path / "chart_dark.png", "dark")


def check_chart_on_page(summary: Locator, screenshot: Path, theme: str) -> None:
    """The chart is about as light as the page around it (its screenshot kept at `screenshot`)."""
    chart, page = assert_chart_matches_page(summary, screenshot)
    print(f"{theme} theme: chart luminance {chart:.3f}, page {page:.3f}: {screenshot}")


def assert_every_cell_ran_without_error(panel: Locator, jupyterlab: NotebookServer, page: Page) -> None:
    """Every code cell ran and none failed: checked in the page and in the notebook JupyterLab saves.

    JupyterLab 4 renders an error output exactly like stderr (both
    `data-mime-type="application/vnd.jupyter.stderr"`), stderr may hold
    harmless warnings, and IPython sends a UsageError as plain stderr text.
    So: Run All stops at a failing cell, leaving later ones unrun; the page
    must show no traceback or UsageError text; and the saved notebook must
    hold no output of type "error".
    """
    prompts = [text.strip() for text in panel.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()]
    assert all(re.search(r"\d", prompt) for prompt in prompts), f"not every code cell ran: prompts {prompts}"

    failures = panel.locator(".jp-OutputArea-output").filter(has_text=FAILURE_TEXT)
    assert failures.count() == 0, "failure shown in the page:\n" + "\n\n".join(failures.all_inner_texts())

    save_notebook(page)
    notebook = jupyterlab.api(f"contents/{NOTEBOOK}?content=1")["content"]
    errors = [
        f"cell {index}: {output['ename']}: {output['evalue']}"
        for index, cell in enumerate(notebook["cells"])
        for output in cell.get("outputs", [])
        if output["output_type"] == "error"
    ]
    assert not errors, "error outputs in the saved notebook:\n" + "\n".join(errors)
