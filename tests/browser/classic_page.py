"""Driving a notebook in the classic Notebook (6.x) as a person does: open it, Cell > Run All, wait, save.

Through the page's own `Jupyter.notebook` object (nbclassic's notebook.js),
which is what its menu items call.
"""

from __future__ import annotations

from playwright.sync_api import Locator, Page

KERNEL_READY_MS = 60_000
SAVE_MS = 30_000

KERNEL_IDLE_JS = """
() => Boolean(window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel
    && Jupyter.notebook.kernel.is_connected() && !Jupyter.notebook.kernel_busy)
"""

# True once Run All has finished or stopped: no cell queued or running ("*"),
# at least one ran, and the kernel is idle (widget messages arrive until then).
RUN_FINISHED_JS = """
() => {
  const prompts = Jupyter.notebook.get_cells().filter(cell => cell.cell_type === 'code')
    .map(cell => cell.input_prompt_number);
  return prompts.some(number => typeof number === 'number') && !prompts.includes('*') && !Jupyter.notebook.kernel_busy;
}
"""


def open_notebook(page: Page, url: str) -> Locator:
    """Open the notebook at `url` and wait for its kernel; returns the notebook's cell container."""
    page.goto(url)
    page.wait_for_function(KERNEL_IDLE_JS, timeout=KERNEL_READY_MS, polling=250)
    return page.locator("#notebook-container")


def run_all_cells(page: Page, timeout_ms: float) -> None:
    """Cell > Run All, then wait until every cell has run or the run stopped at an error."""
    page.locator("#celllink").click()
    page.locator("#run_all_cells").click()
    page.wait_for_function(RUN_FINISHED_JS, timeout=timeout_ms, polling=250)


def save_notebook(page: Page) -> None:
    """File > Save and Checkpoint, then wait until the notebook is no longer dirty."""
    page.locator("#filelink").click()
    page.locator("#save_checkpoint").click()
    page.wait_for_function("() => Jupyter.notebook.dirty === false", timeout=SAVE_MS, polling=250)
