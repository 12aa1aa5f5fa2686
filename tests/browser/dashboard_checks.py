"""What the quick-start notebook must show in any frontend once it ran: one summary of the run, a model that learned.

The live dashboard (ipywidgets) is replaced in place by the static summary
when the run ends, so the cell shows the summary and no widget view.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from matplotlib.image import imread
from playwright.sync_api import Locator, Page, expect

# Plain groups: playwright hands the pattern to JavaScript, which has no (?P<name>...).
ACCURACY_LINE = re.compile(r"accuracy before: ([\d.]+), after: ([\d.]+)")
SCREEN_HEIGHT = 900  # px: the summary fits one screen of a 1400x900 window
AA_CONTRAST = 4.5
CHART_TO_PAGE_LUMINANCE = 0.2  # at most this far apart (0..1); a white chart on JupyterLab's dark page: 0.96 on 0.006


def the_summary(outputs: Locator, page: Page) -> Locator:
    """The one run summary among `outputs`, with no dashboard widget left beside it, of a run that did all its steps."""
    summary = outputs.locator(".tpu-nb-summary")
    expect(summary, "the %%tpu_train cell shows exactly one summary of the run").to_have_count(1, timeout=60_000)
    expect(outputs.locator(".widget-hprogress"), "the live dashboard was replaced, not kept").to_have_count(0)
    expect(summary.locator(".tpu-nb-pill").first).to_have_text("done")
    expect(summary.locator("p").first).to_contain_text(re.compile(r"step (\d+)/\1 \(100%\)"))
    return summary


def assert_chart_drawn(summary: Locator, page: Page) -> None:
    """The summary's chart shows a decoded PNG."""
    chart = summary.locator("img")
    expect(chart).to_have_count(1)
    expect(chart).to_be_visible()
    source = chart.get_attribute("src") or ""
    assert source.startswith("data:image/png"), f"unexpected chart source {source[:60]!r}"
    page.wait_for_function("image => image.complete", arg=chart.element_handle(), timeout=10_000)
    width, height = chart.evaluate("image => [image.naturalWidth, image.naturalHeight]")
    assert width > 0 and height > 0, "the chart image did not decode"


def assert_fits_one_screen(cell_outputs: Locator) -> float:
    """The rendered height of a cell's whole output (the summary and what the cell printed), under one 900 px screen."""
    expect(cell_outputs).to_have_count(1)
    height = cell_outputs.evaluate("element => element.getBoundingClientRect().height")
    assert 0 < height < SCREEN_HEIGHT, f"the cell's output is {height:.0f} px tall"
    return float(height)


def assert_text_contrast(summary: Locator) -> float:
    """The summary's text against the background it is drawn on, at WCAG AA (4.5:1) or better."""
    text, background = (luminance(np.array(rgb) / 255) for rgb in summary.evaluate(COLOURS_JS))
    ratio = (max(text, background) + 0.05) / (min(text, background) + 0.05)
    assert ratio >= AA_CONTRAST, f"text contrast {ratio:.2f}:1"
    return float(ratio)


def assert_chart_matches_page(summary: Locator, screenshot: Path) -> tuple[float, float]:
    """The chart, as the page shows it (saved to `screenshot`), is about as light as the page behind it: not a box.

    Returns the mean luminance of the chart and the luminance of the page.
    """
    chart = summary.locator("img")
    chart.screenshot(path=str(screenshot))
    chart_luminance = float(luminance(imread(screenshot)[..., :3]).mean())
    _text, background = summary.evaluate(COLOURS_JS)
    page_luminance = float(luminance(np.array(background) / 255))
    assert abs(chart_luminance - page_luminance) <= CHART_TO_PAGE_LUMINANCE, (
        f"the chart's mean luminance is {chart_luminance:.2f} on a page of {page_luminance:.2f}: see {screenshot}"
    )
    return chart_luminance, page_luminance


def luminance(rgb: np.ndarray) -> np.ndarray:
    """WCAG relative luminance (0 black .. 1 white) of sRGB colours in 0..1, red, green, blue along the last axis."""
    linear = np.where(rgb <= 0.03928, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    return linear @ np.array([0.2126, 0.7152, 0.0722])


def assert_model_learned(outputs: Locator) -> None:
    """Among the notebook's `outputs`, one "accuracy before: X, after: Y" line shows Y > X + 0.3 (0.49 -> 1.00 measured)."""
    line = outputs.filter(has_text=ACCURACY_LINE)
    expect(line).to_have_count(1)
    match = ACCURACY_LINE.search(line.inner_text())
    assert match is not None
    before, after = float(match[1]), float(match[2])
    assert after > before + 0.3, f"accuracy did not improve enough: before {before}, after {after}"


# The computed text colour of an element and the first opaque background
# behind it (walking up the page), as [[r, g, b], [r, g, b]] in 0..255.
COLOURS_JS = """
(element) => {
  const rgb = (text) => (text.match(/[\\d.]+/g) || []).map(Number);
  const text = rgb(getComputedStyle(element).color).slice(0, 3);
  let node = element, background = [255, 255, 255];
  while (node) {
    const colour = rgb(getComputedStyle(node).backgroundColor);
    if (colour.length === 3 || (colour.length === 4 && colour[3] > 0.5)) { background = colour.slice(0, 3); break; }
    node = node.parentElement;
  }
  return [text, background];
}
"""
