"""The live training dashboard: core ipywidgets, refreshed as worker events arrive.

Only core widgets (no custom widget manager, so Colab renders it too), and
throttled refreshes: this runs in the kernel while training.
"""

from __future__ import annotations

import html
import math
import warnings

import ipywidgets as widgets
from IPython import display as ipython_display

from tpu_nb import TpuNbWarning
from tpu_nb.wire.events import Event

from ..status import RunStatus
from .chart import render_chart
from .html_parts import STATUS_COLOURS, detail_html, doctor_html, health_html, notices_html, table_html
from .state import MetricRow, ProgressSnapshot, ProgressState
from .summary import display_summary, summary_bundle
from .text import format_duration, format_rate, step_text, workers_text

STATUS_REFRESH_SECONDS = 0.25
CHART_REFRESH_SECONDS = 1.0
CHART_TIME_SHARE = 0.1
"""On a slow kernel the chart is redrawn less often, to take at most this share of its time."""
LIVE_TABLE_ROWS = 20

_PHASE_COLOURS = {
    "starting": "#607d8b",
    "compiling": "#6a1b9a",
    "training": "#1565c0",
    "evaluating": "#00838f",
    **STATUS_COLOURS,
}
_OTHER_PHASE_COLOUR = "#455a64"  # a worker phase without a colour of its own
_BAR_STYLES = {"done": "success", "failed": "danger", "interrupted": "warning", "timeout": "warning", "stopped": "warning"}
_CELL = "padding:1px 10px;text-align:left"


class Dashboard:
    """Status line, progress bar, chart, metrics table, workers, XLA health and notices."""

    def __init__(self, progress: ProgressState) -> None:
        self.progress = progress
        self.status = widgets.HTML()
        self.progress_bar = widgets.IntProgress(min=0, max=1, value=0, layout=widgets.Layout(width="60%"))
        self.step_label = widgets.Label()
        self.detail = widgets.HTML()
        self.chart = widgets.Image(format="png", layout=widgets.Layout(display="none", max_width="100%", align_self="flex-start"))
        self.table = widgets.HTML()
        self.worker_rows = widgets.HTML()
        self.health = widgets.HTML()
        self.notices = widgets.HTML()
        self.widget = widgets.VBox(
            [
                self.status,
                widgets.HBox([self.progress_bar, self.step_label]),
                self.detail,
                self.chart,
                self.table,
                self.worker_rows,
                self.health,
                self.notices,
            ]
        )
        self._status_refreshed_at = -math.inf
        self._chart_refreshed_at = -math.inf
        self._chart_interval = CHART_REFRESH_SECONDS
        self._charted_row: MetricRow | None = None  # the newest history row drawn / tabled so far
        self._tabled_row: MetricRow | None = None
        self._chart_failed = False
        self._shown = False
        self._summary_slot: ipython_display.DisplayHandle | None = None  # None outside IPython
        self._refresh_text(progress.snapshot())

    def display(self) -> None:
        """Show the dashboard in the current cell (once), with a slot below it for the summary."""
        if self._shown:
            return
        self._shown = True
        ipython_display.display(self.widget)
        # An empty output with a display_id: finish() fills it in place, below the
        # widget, even from a background run's helper thread after the cell ended.
        self._summary_slot = ipython_display.display(display_id=True)

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
        """Show the final state (unthrottled), then the static summary below the widget."""
        self.progress.finish(status, detail)
        snapshot = self.progress.snapshot()
        self._refresh_text(snapshot)
        self._refresh_chart(snapshot)
        if self._summary_slot is not None:
            self._summary_slot.update(summary_bundle(snapshot), raw=True)
        else:
            display_summary(snapshot)

    def _refresh_text(self, snapshot: ProgressSnapshot) -> None:
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
        colour = _phase_colour(snapshot.phase)
        if snapshot.detail:
            self.detail.value = detail_html(snapshot.detail, colour)
        elif snapshot.failures:
            self.detail.value = detail_html("\n".join(snapshot.failures), _PHASE_COLOURS["failed"])
        else:
            self.detail.value = ""
        self.worker_rows.value = _workers_html(snapshot)
        self.health.value = health_html(snapshot) + doctor_html(snapshot)
        self.notices.value = notices_html(snapshot.notices)
        newest = snapshot.history[-1] if snapshot.history else None
        if newest is not self._tabled_row:
            self._tabled_row = newest
            self.table.value = table_html(snapshot, LIVE_TABLE_ROWS)

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
    phase = f'<strong style="color:{_phase_colour(snapshot.phase)}">{html.escape(snapshot.phase)}</strong>'
    facts = [
        f"<strong>{html.escape(snapshot.title)}</strong>",
        html.escape(snapshot.runtime_label),
        html.escape(workers_text(snapshot)),
        phase,
        f"elapsed {format_duration(snapshot.elapsed)}",
    ]
    if snapshot.eta is not None:
        facts.append(f"ETA {format_duration(snapshot.eta)}")
    if snapshot.steps_per_second is not None:
        facts.append(f"{format_rate(snapshot.steps_per_second)} steps/s")
    if snapshot.samples_per_second is not None:
        facts.append(f"{format_rate(snapshot.samples_per_second)} samples/s")
    if snapshot.epoch is not None:
        facts.append(f"epoch {snapshot.epoch:.2f}")
    return " · ".join(facts)


def _workers_html(snapshot: ProgressSnapshot) -> str:
    if not snapshot.workers:
        return ""
    header = "".join(f'<th style="{_CELL}">{label}</th>' for label in ("Rank", "Device", "Step", "Phase", "Last heard", "Compilations"))
    rows = []
    for worker in snapshot.workers:
        heard = f"{format_duration(worker.seconds_since_heard)} ago"
        heard_style = f"{_CELL};color:{_PHASE_COLOURS['failed']};font-weight:bold" if worker.stale else _CELL
        phase_style = f"{_CELL};color:{_PHASE_COLOURS['failed']}" if worker.phase == "failed" else _CELL
        compiled = f"{worker.compile_count} ({format_duration(worker.compile_seconds)})"
        cells = [
            (_CELL, str(worker.rank)),
            (_CELL, worker.device or "—"),
            (_CELL, "—" if worker.step is None else str(worker.step)),
            (phase_style, worker.phase),
            (heard_style, heard),
            (_CELL, compiled),
        ]
        rows.append("<tr>" + "".join(f'<td style="{style}">{html.escape(text)}</td>' for style, text in cells) + "</tr>")
    return (
        '<table class="tpu-nb-workers" style="border-collapse:collapse;font-size:85%">'
        f"<thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _phase_colour(phase: str) -> str:
    return _PHASE_COLOURS.get(phase, _OTHER_PHASE_COLOUR)
