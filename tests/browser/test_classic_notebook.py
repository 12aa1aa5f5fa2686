"""The quick-start notebook in Colab's widget stack: a kernel with ipywidgets 7.7.1 and its own frontend.

`make test-compat` runs this against the Colab image environment
(TPU_NB_CLASSIC_NOTEBOOK_PYTHON=.venv-colab/bin/python): the classic Notebook
6.5.7 with widgetsnbextension 3.6.10 serves and renders, its kernel runs
there too. (JupyterLab 4's widget manager renders only ipywidgets 8: with a
7.7.1 kernel it fails with "Module @jupyter-widgets/controls, version ^1.5.0
is not registered", measured; Colab renders ipywidgets 7 with a frontend of
its own, which no test can reach.)
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator

import pytest

pytest.importorskip("playwright.sync_api", reason="needs playwright: `pip install playwright` (never `playwright install`)")

from classic_page import open_notebook, run_all_cells, save_notebook
from dashboard_checks import assert_chart_drawn, assert_fits_one_screen, assert_model_learned, the_summary
from playwright.sync_api import Page, expect
from servers import CHROMIUM, REPO, NotebookServer, start_classic_notebook, stop_server

PYTHON = os.environ.get("TPU_NB_CLASSIC_NOTEBOOK_PYTHON")
if not PYTHON:
    pytest.skip("runs in `make test-compat`, against the Colab image's environment", allow_module_level=True)
if not CHROMIUM.exists():
    pytest.skip(f"needs Chromium at {CHROMIUM}: `apt-get install chromium`", allow_module_level=True)

NOTEBOOK = "01_quickstart.ipynb"
SCREENSHOT = REPO / "build" / "browser_quickstart_classic_notebook.png"
RUN_ALL_MS = 150_000
FAILURE_TEXT = re.compile(r"Traceback \(most recent call last\)|UsageError: |Error displaying widget")


@pytest.fixture(scope="module")
def classic_notebook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NotebookServer]:
    assert PYTHON is not None
    server = start_classic_notebook(tmp_path_factory.mktemp("classic"), [REPO / "notebooks" / NOTEBOOK], PYTHON)
    try:
        yield server
    finally:
        stop_server(server)


def test_the_kernel_has_colabs_ipywidgets() -> None:
    assert PYTHON is not None
    version = subprocess.run([PYTHON, "-c", "import ipywidgets; print(ipywidgets.__version__)"], check=True, capture_output=True, text=True)
    assert version.stdout.strip() == "7.7.1"


def test_quickstart_runs_with_ipywidgets_7(classic_notebook: NotebookServer, page: Page) -> None:
    expect.set_options(timeout=15_000)
    notebook = open_notebook(page, classic_notebook.notebook_url(NOTEBOOK))
    try:
        run_all_cells(page, timeout_ms=RUN_ALL_MS)
    finally:
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOT), full_page=True)

    prompts = page.evaluate("() => Jupyter.notebook.get_cells().filter(c => c.cell_type === 'code').map(c => c.input_prompt_number)")
    assert all(isinstance(prompt, int) for prompt in prompts), f"not every code cell ran: prompts {prompts}"
    failures = notebook.locator(".output_area").filter(has_text=FAILURE_TEXT)
    assert failures.count() == 0, "failure shown in the page:\n" + "\n\n".join(failures.all_inner_texts())

    summary = the_summary(notebook.locator(".output_area"), page)
    assert_chart_drawn(summary, page)
    assert_fits_one_screen(notebook.locator(".output").filter(has=page.locator(".tpu-nb-summary")))
    assert_model_learned(notebook.locator(".output_area"))

    save_notebook(page)
    saved = classic_notebook.api(f"contents/{NOTEBOOK}?content=1")["content"]
    errors = [output for cell in saved["cells"] for output in cell.get("outputs", []) if output["output_type"] == "error"]
    assert not errors, errors
