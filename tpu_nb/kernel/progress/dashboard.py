"""The live training dashboard: core ipywidgets, refreshed as worker events arrive; one summary at the end.

Only core widgets (no custom widget manager, so Colab renders it too), and
throttled refreshes: this runs in the kernel while training. The layout
fits one screen: status and bar; the run's speed (tokens/s, MFU, where a
step's time goes); the chart beside the latest logged values; one health line, with workers and XLA details that open by themselves when
something needs attention. The whole dashboard is shown under a display id
and replaced by the static summary when the run ends, so the live page, a
saved notebook and an export all show one view of the run.

While a foreground run trains, the kernel handles no widget messages, so
every control is plain HTML the browser runs by itself (`<details>`); such
a part is redrawn only now and then, so that opening it lasts.
"""

from __future__ import annotations

import html
import math
import warnings

import ipywidgets as widgets
from IPython import display as ipython_display

from tpu_nb.basics.units import format_duration
from tpu_nb.errors import TpuNbWarning
from tpu_nb.kernel.endings.status import RunStatus
from tpu_nb.kernel.progress.chart import render_chart
from tpu_nb.kernel.progress.html_parts import (
    all_rows_html,
    detail_html,
    health_lines_html,
    needs_attention,
    notices_html,
    phase_colour,
    pill,
    stall_html,
    table_html,
    throughput_html,
    workers_details_html,
)
from tpu_nb.kernel.progress.snapshot import MetricRow, ProgressSnapshot
from tpu_nb.kernel.progress.state import ProgressState
from tpu_nb.kernel.progress.summary import display_summary, summary_bundle
from tpu_nb.kernel.progress.text import format_rate, step_text, workers_text
from tpu_nb.kernel.progress.widget_display import display_replaceable
from tpu_nb.wire.events import Event

STATUS_REFRESH_SECONDS = 0.25
CHART_REFRESH_SECONDS = 1.0
CHART_TIME_SHARE = 0.1
"""On a slow kernel the chart is redrawn less often, to take at most this share of its time."""
DETAILS_REFRESH_SECONDS = 10.0
"""Collapsible parts (all logged rows; workers and XLA) are redrawn this seldom, unless their state changes."""
LIVE_TABLE_ROWS = 8
LIVE_HISTORY_ROWS = 500
_BAR_STYLES = {
    "done": "success",
    "failed": "danger",
    "interrupted": "warning",
    "timeout": "warning",
    "stopped": "warning",
    "pruned": "warning",
}


class Dashboard:
    """Status, progress bar, chart beside the latest values, one health line with details that open on problems."""

    def __init__(self, progress: ProgressState) -> None:
        self.progress = progress
        self.status = widgets.HTML()
        self.progress_bar = widgets.IntProgress(min=0, max=1, value=0, layout=widgets.Layout(width="60%"))
        self.step_label = widgets.Label()
        self.detail = widgets.HTML()
        self.speed = widgets.HTML()  # tokens/s, samples/s, MFU, the step's time split
        self.chart = widgets.Image(format="png", layout=widgets.Layout(display="none", max_width="62%", align_self="flex-start"))
        self.table = widgets.HTML()
        self.history = widgets.HTML()
        self.health = widgets.HTML()
        self.stall = widgets.HTML()  # where every rank is, when the watchdog spoke
        self.worker_rows = widgets.HTML()  # workers and the XLA details, in a <details> that opens on problems
        self.notices = widgets.HTML()
        values = widgets.VBox([self.table, self.history], layout=widgets.Layout(flex="1 1 280px", margin="0 0 0 12px"))
        self.widget = widgets.VBox(
            [
                self.status,
                widgets.HBox([self.progress_bar, self.step_label]),
                self.detail,
                self.speed,
                widgets.HBox([self.chart, values], layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start")),
                self.stall,
                self.health,
                self.worker_rows,
                self.notices,
            ]
        )
        self._status_refreshed_at = -math.inf
        self._chart_refreshed_at = -math.inf
        self._details_refreshed_at = -math.inf
        self._details_open: bool | None = None
        self._chart_interval = CHART_REFRESH_SECONDS
        self._charted_row: MetricRow | None = None  # the newest history row drawn / tabled so far
        self._tabled_row: MetricRow | None = None
        self._chart_failed = False
        self._shown_stall: object = None
        self._shown = False
        self._handle: ipython_display.DisplayHandle | None = None  # None until shown, and outside IPython
        self._refresh_text(progress.snapshot())

    def display(self) -> None:
        """Show the dashboard in the current cell (once), under a display id the summary will take over."""
        if self._shown:
            return
        self._shown = True
        # finish() replaces this output in place, even from a background run's helper thread after the cell ended.
        self._handle = display_replaceable(self.widget)

    def on_event(self, event: Event) -> None:
        self.progress.on_event(event)
        now = self.progress.clock()
        status_due = now - self._status_refreshed_at >= STATUS_REFRESH_SECONDS
        chart_due = now - self._chart_refreshed_at >= self._chart_interval
        if not (status_due or chart_due):
            return
        snapshot = self.progress.snapshot()
        if status_due:
            self._status_refreshed_at = now
            self._refresh_text(snapshot)
        if chart_due:
            self._chart_refreshed_at = now
            self._refresh_chart(snapshot)

    def finish(self, status: RunStatus, detail: str | None = None) -> None:
        """The final state, then the static summary in the dashboard's place (its widgets closed)."""
        self.progress.finish(status, detail)
        snapshot = self.progress.snapshot()
        self._refresh_text(snapshot, final=True)
        self._refresh_chart(snapshot)
        if self._handle is None:
            display_summary(snapshot)
            return
        self._handle.update(summary_bundle(snapshot), raw=True)
        for part in _tree(self.widget):
            part.close()

    def _refresh_text(self, snapshot: ProgressSnapshot, final: bool = False) -> None:
        self.status.value = _status_html(snapshot)
        maximum = snapshot.max_steps or 1
        if snapshot.phase == "done":
            value = maximum  # Progress is throttled: the last steps may never have been reported
        elif snapshot.max_steps:
            value = min(snapshot.step or 0, maximum)
        else:
            value = 0  # no known end: the label shows the step
        with self.progress_bar.hold_sync():
            self.progress_bar.max = maximum
            self.progress_bar.value = value
            self.progress_bar.bar_style = _BAR_STYLES.get(snapshot.phase, "")
        self.step_label.value = step_text(snapshot)
        colour = phase_colour(snapshot.phase)
        if snapshot.detail:
            self.detail.value = detail_html(snapshot.detail, colour)
        elif snapshot.failures:
            self.detail.value = detail_html("\n".join(snapshot.failures), phase_colour("failed"))
        else:
            self.detail.value = ""
        self.speed.value = throughput_html(snapshot)
        self.health.value = health_lines_html(snapshot)
        if snapshot.stall is not self._shown_stall:  # redrawn only when it changes: its whole stacks may be opened
            self._shown_stall = snapshot.stall
            self.stall.value = stall_html(snapshot.stall)
        self.notices.value = notices_html(snapshot.notices)
        newest = snapshot.history[-1] if snapshot.history else None
        if newest is not self._tabled_row:
            self._tabled_row = newest
            self.table.value = table_html(snapshot, LIVE_TABLE_ROWS)
        self._refresh_details(snapshot, final)

    def _refresh_details(self, snapshot: ProgressSnapshot, final: bool) -> None:
        """The collapsible parts: redrawn seldom (a redraw closes what the user opened), at once when they must open."""
        attention = needs_attention(snapshot)
        now = self.progress.clock()
        if not final and attention == self._details_open and now - self._details_refreshed_at < DETAILS_REFRESH_SECONDS:
            return
        self._details_refreshed_at, self._details_open = now, attention
        self.worker_rows.value = workers_details_html(snapshot, attention)
        self.history.value = all_rows_html(snapshot, LIVE_TABLE_ROWS, LIVE_HISTORY_ROWS)

    def _refresh_chart(self, snapshot: ProgressSnapshot) -> None:
        newest = snapshot.history[-1] if snapshot.history else None
        if newest is self._charted_row or self._chart_failed:
            return
        self._charted_row = newest
        started_at = self.progress.clock()
        try:
            png = render_chart(snapshot)
        # Broad on purpose: an observer that raises stops the training run, and
        # a chart is not worth that. The warning makes it visible (and fails tests).
        except Exception as error:  # noqa: BLE001
            self._chart_failed = True
            self.chart.layout.display = "none"
            warnings.warn(f"tpu_nb: the training chart failed and is turned off: {error!r}", TpuNbWarning, stacklevel=2)
            return
        render_seconds = self.progress.clock() - started_at
        self._chart_interval = max(CHART_REFRESH_SECONDS, render_seconds / CHART_TIME_SHARE)
        if png is not None:
            self.chart.value = png
            self.chart.layout.display = None


def _status_html(snapshot: ProgressSnapshot) -> str:
    facts = [
        f"<strong>{html.escape(snapshot.title)}</strong>",
        pill(snapshot.phase, phase_colour(snapshot.phase)),
        html.escape(snapshot.runtime_label),
        html.escape(workers_text(snapshot)),
        f"elapsed {format_duration(snapshot.elapsed)}",
    ]
    if snapshot.eta is not None:
        facts.append(f"ETA {format_duration(snapshot.eta)}")
    if snapshot.steps_per_second is not None:
        facts.append(f"{format_rate(snapshot.steps_per_second)} steps/s")
    if snapshot.epoch is not None:
        facts.append(f"epoch {snapshot.epoch:.2f}")
    return " · ".join(facts)


def _tree(widget: widgets.Widget) -> list[widgets.Widget]:
    return [widget, *(part for child in getattr(widget, "children", ()) for part in _tree(child))]
