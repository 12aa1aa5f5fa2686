"""What the quick-start notebook must show in any frontend: the dashboard finished, its chart, a model that learned.

ipywidgets 7 and 8 both render a progress bar as `.widget-hprogress` holding
a `.progress-bar`, and an Image widget as an `<img>`.
"""

from __future__ import annotations

import re

from playwright.sync_api import Locator, Page, expect

# Plain groups: playwright hands the pattern to JavaScript, which has no (?P<name>...).
ACCURACY_LINE = re.compile(r"accuracy before: ([\d.]+), after: ([\d.]+)")


def assert_progress_finished(dashboard: Locator) -> None:
    """The ipywidgets IntProgress rendered, green ("success") and full."""
    progress = dashboard.locator(".widget-hprogress")
    expect(progress).to_be_visible()
    bar = progress.locator(".progress-bar")
    expect(bar).to_have_class(re.compile(r"\bprogress-bar-success\b"))
    assert bar.evaluate("element => element.style.width") == "100%"


def assert_chart_drawn(dashboard: Locator, page: Page) -> None:
    """The dashboard's chart (an ipywidgets Image) shows a decoded PNG."""
    chart = dashboard.locator("img")
    expect(chart).to_have_count(1)
    expect(chart).to_be_visible()
    source = chart.get_attribute("src") or ""
    assert source.startswith(("blob:", "data:image/png")), f"unexpected chart source {source[:60]!r}"
    page.wait_for_function("image => image.complete", arg=chart.element_handle(), timeout=10_000)
    width, height = chart.evaluate("image => [image.naturalWidth, image.naturalHeight]")
    assert width > 0 and height > 0, "the chart image did not decode"


def assert_model_learned(outputs: Locator) -> None:
    """Among the notebook's `outputs`, one "accuracy before: X, after: Y" line shows Y > X."""
    line = outputs.filter(has_text=ACCURACY_LINE)
    expect(line).to_have_count(1)
    match = ACCURACY_LINE.search(line.inner_text())
    assert match is not None
    before, after = float(match[1]), float(match[2])
    assert after > before, f"accuracy did not improve: before {before}, after {after}"
