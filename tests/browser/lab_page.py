"""Driving a notebook in JupyterLab 4 as a person does: open it, Run > Run All Cells, wait, save.

Selectors are JupyterLab 4's own classes and command ids (checked on 4.6).
"""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Locator, Page

KERNEL_READY_MS = 60_000
SAVE_MS = 30_000
SCREENSHOT_MAX_HEIGHT = 8_000

# The status bar's kernel item reads "<kernel name> | <state>", e.g.
# "Python 3 (ipykernel) | Idle"; before a kernel is connected it reads
# "No Kernel | Initializing", then "... | Connecting". The toolbar's
# data-status attribute is no help here: it says "idle" before any kernel exists.
KERNEL_IDLE_TEXT = re.compile(r"^(?!No Kernel\b).+ \| Idle$")

# True once a Run All has finished or stopped: no cell is queued or running
# ("[*]") and at least one ran ("[1]"). After an error JupyterLab clears the
# cells still queued back to "[ ]", so this also ends a failed run early.
RUN_FINISHED_JS = """
() => {
  const prompts = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell .jp-InputPrompt')]
    .map(prompt => prompt.textContent.trim());
  return prompts.length > 0 && !prompts.some(text => text.includes('*')) && prompts.some(text => /\\d/.test(text));
}
"""


def open_notebook(page: Page, url: str, name: str) -> Locator:
    """Open the notebook at `url`, start its kernel (accepting "Select Kernel" if asked); returns its panel."""
    page.goto(url)
    tab = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-current .lm-TabBar-tabLabel")
    tab.filter(has_text=name).wait_for()
    panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
    # A notebook without kernel metadata asks which kernel to start; ours names
    # python3, but accept the preferred kernel if JupyterLab asks anyway.
    kernel_dialog = page.locator(".jp-Dialog").filter(has_text="Select Kernel")
    kernel_idle = page.locator(".jp-StatusBar-Widget").get_by_text(KERNEL_IDLE_TEXT)
    kernel_dialog.or_(kernel_idle).first.wait_for(timeout=KERNEL_READY_MS)
    if kernel_dialog.is_visible():
        kernel_dialog.locator(".jp-mod-accept").click()
    kernel_idle.wait_for(timeout=KERNEL_READY_MS)
    return panel


def run_menu_command(page: Page, menu: str, command: str) -> None:
    """Click a menu bar entry, then the item for JupyterLab command `command` (stable across label changes)."""
    page.get_by_role("menuitem", name=menu, exact=True).click()
    page.locator(f'.lm-Menu-item[data-command="{command}"]').click()


def run_all_cells(page: Page, timeout_ms: float) -> None:
    """Run > Run All Cells, then wait until every cell has run or the run stopped at an error."""
    run_menu_command(page, "Run", "runmenu:run-all")
    page.wait_for_function(RUN_FINISHED_JS, timeout=timeout_ms, polling=250)


def save_notebook(page: Page) -> None:
    """File > Save Notebook, then wait until the tab no longer shows unsaved changes."""
    run_menu_command(page, "File", "docmanager:save")
    dirty_tab = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.jp-mod-current.jp-mod-dirty")
    dirty_tab.wait_for(state="detached", timeout=SAVE_MS)


def screenshot_whole_notebook(page: Page, panel: Locator, path: Path) -> None:
    """Grow the window until the whole notebook shows unscrolled, then save a full-page screenshot.

    JupyterLab fits itself to the window and scrolls inside the notebook (Run
    All leaves it scrolled to the last cell), so a "full page" screenshot
    alone would show one screen of cells.
    """
    scroller = panel.locator(".jp-WindowedPanel-outer")
    # Offscreen cells are laid out at an estimated height until shown, so the
    # height they need is known only after growing: measure again, a few times.
    for _ in range(4):
        missing = scroller.evaluate(SCROLL_TO_TOP_AND_MEASURE_JS)
        viewport = page.viewport_size or {"width": 1400, "height": 1000}
        if missing <= 0 or viewport["height"] >= SCREENSHOT_MAX_HEIGHT:
            break
        page.set_viewport_size({"width": viewport["width"], "height": min(viewport["height"] + missing, SCREENSHOT_MAX_HEIGHT)})
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)


# Scrolls the notebook to its top, waits two frames (layout and paint after
# any resize), and returns how many pixels the cells still extend below the
# visible area (plus a margin).
SCROLL_TO_TOP_AND_MEASURE_JS = """
async (scroller) => {
  const frame = () => new Promise(resolve => requestAnimationFrame(resolve));
  await frame();
  scroller.scrollTop = 0;
  await frame();
  await frame();
  const cells = scroller.querySelectorAll('.jp-Cell');
  if (cells.length === 0) return 0;
  const bottom = cells[cells.length - 1].getBoundingClientRect().bottom;
  return Math.ceil(bottom - scroller.getBoundingClientRect().bottom + 24);
}
"""
