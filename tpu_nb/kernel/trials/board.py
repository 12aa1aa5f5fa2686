"""A sweep's dashboard: a row per trial (status, chips, step, tokens/s, loss, the compared metric), the best so far, a
curve per trial.

A search's trials get their rows as they start (the study chooses them as
chips free); a pruned trial's row says the step it was stopped at, and its
curve ends there.

In a notebook kernel it is one output, redrawn in place about once a second
(an IPython display id: no widget, so Colab, Kaggle, JupyterLab and a saved
notebook all show it). Elsewhere (a script, a terminal) each trial's end is
a line of text.
"""

from __future__ import annotations

import base64
import html
import time
from collections.abc import Sequence
from typing import Any

from tpu_nb.kernel.notebook.cell_output import Write, write_to_sys
from tpu_nb.kernel.notebook.frontend import in_notebook_kernel
from tpu_nb.kernel.planning.worlds import World
from tpu_nb.kernel.progress.chart import overlay_chart
from tpu_nb.kernel.progress.html_parts import phase_colour, pill
from tpu_nb.kernel.progress.text import format_count_rate, format_value
from tpu_nb.kernel.progress.throughput import ThroughputMeter
from tpu_nb.kernel.trials.comparison import Comparison, MetricChoice, TrialRow, compare, default_metric
from tpu_nb.kernel.trials.spec import Trial
from tpu_nb.kernel.trials.sweep import TrialOutcome, TrialWatch
from tpu_nb.wire.events import Event, Progress

REDRAW_SECONDS = 1.0
LOSS = "loss"


class _Row:
    def __init__(self, trial: Trial) -> None:
        self.trial = trial
        self.status = "queued"
        self.where: str | None = None
        self.step: int | None = None
        self.max_steps: int | None = None
        self.last: dict[str, float] = {}
        self.curves: dict[str, list[tuple[int, float]]] = {}
        self.speed = ThroughputMeter()

    @property
    def tokens_per_second(self) -> str:
        tokens = self.speed.live().tokens_per_second
        return "" if tokens is None else format_count_rate(tokens)

    def take(self, event: Progress) -> None:
        self.speed.on_event(event)
        if event.max_steps is not None:
            self.max_steps = event.max_steps
        if event.step is not None:
            self.step = event.step
        for name, value in event.metrics.items():
            self.last[name] = value
            if event.step is not None:
                self.curves.setdefault(name, []).append((event.step, value))


class SweepBoard(TrialWatch):
    """The live rows and curves of a sweep's trials; `finish` adds the comparison."""

    what = "board"

    def __init__(
        self,
        trials: Sequence[Trial],
        worlds: Sequence[World],
        metric: MetricChoice | None,
        title: str,
        write: Write = write_to_sys,
        shown: bool = True,
        planned: int | None = None,
    ):
        self._rows = {trial.number: _Row(trial) for trial in trials}
        self._planned = len(self._rows) if planned is None else planned  # a search's trials are known as they start
        self._ended: dict[int, TrialRow] = {}
        self._worlds = len(worlds)
        self._metric = metric
        self._title = title
        self._write = write
        self._handle: Any = None
        self._drawn_at = 0.0
        self._changed = True
        self._comparison: Comparison | None = None
        self._shown = shown  # --no-progress: nothing drawn or printed (the result still compares the trials)
        if shown and in_notebook_kernel():
            from IPython.display import display

            self._handle = display(self._bundle(), raw=True, display_id=True)

    def started(self, trial: Trial, world: World) -> None:
        row = self._row(trial)
        row.status, row.where = "training", world.label
        self._changed = True

    def on_event(self, trial: Trial, event: Event) -> None:
        if isinstance(event, Progress):
            self._row(trial).take(event)
            self._changed = True

    def ended(self, outcome: TrialOutcome) -> None:
        row = self._row(outcome.trial)
        row.status = outcome.status
        self._ended[outcome.trial.number] = TrialRow(outcome.trial, outcome.status, outcome.where, outcome.final, outcome.seconds)
        self._changed = True
        if self._handle is None and self._shown:
            where = f" on {outcome.where}" if outcome.where else ""
            shown = ", ".join(f"{name}={format_value(value)}" for name, value in outcome.final.items())
            self._write(
                "stdout",
                f"tpu_nb: trial #{outcome.trial.number} ({outcome.trial.label}) {outcome.status}{where}: {shown or 'no metrics'}\n",
            )

    def refresh(self) -> None:
        if self._handle is None or not self._changed or time.monotonic() - self._drawn_at < REDRAW_SECONDS:
            return
        self._draw()

    def finish(self, comparison: Comparison) -> None:
        """The final rows, curves and the comparison."""
        self._comparison = comparison
        self._metric = comparison.metric
        if self._handle is not None:
            self._draw()

    def _row(self, trial: Trial) -> _Row:
        return self._rows.setdefault(trial.number, _Row(trial))

    def best_so_far(self) -> str | None:
        """The best of the trials that ended, by the compared metric: "#5 (lr=0.01) loss=0.12" (None: none reported it yet)."""
        rows = list(self._ended.values())
        metric = self._metric or default_metric(rows)
        best = compare(rows, metric).best
        if best is None:
            return None
        return f"#{best.trial.number} ({best.trial.label}) {metric.name}={format_value(best.final[metric.name])}"

    def _draw(self) -> None:
        self._handle.update(self._bundle(), raw=True)
        self._drawn_at, self._changed = time.monotonic(), False

    def _bundle(self) -> dict[str, str]:
        return {"text/plain": self.text(), "text/html": self.html()}

    def text(self) -> str:
        lines = [f"{self._title}: {self._planned} trials, {self._worlds} at a time"]
        for row in self._rows.values():
            step = (
                "" if row.step is None or row.status == "pruned" else f" step {row.step}" + (f"/{row.max_steps}" if row.max_steps else "")
            )
            metrics = " ".join(f"{name}={format_value(row.last[name])}" for name in self._shown_metrics() if name in row.last)
            where = f" on {row.where}" if row.where else ""
            speed = f" {row.tokens_per_second} tokens/s" if row.tokens_per_second else ""
            lines.append(f"  #{row.trial.number} {row.trial.label}: {_status(row)}{where}{step}{speed} {metrics}".rstrip())
        best = self.best_so_far()
        if self._comparison is not None:
            lines.append(self._comparison.text())
        elif best is not None:
            lines.append(f"best so far: {best}")
        return "\n".join(lines)

    def html(self) -> str:
        metrics = self._shown_metrics()
        head = "".join(
            f"<th style='padding:2px 10px'>{html.escape(name)}</th>"
            for name in ["#", "trial", "status", "on", "step", "tokens/s", *metrics]
        )
        body = []
        for row in self._rows.values():
            step = "" if row.step is None else f"{row.step}" + (f"/{row.max_steps}" if row.max_steps else "")
            values = [format_value(row.last[name]) if name in row.last else "" for name in metrics]
            cells = [
                str(row.trial.number),
                html.escape(row.trial.label),
                pill(_status(row), phase_colour(row.status)),
                row.where or "",
                step,
                row.tokens_per_second,
                *values,
            ]
            body.append("<tr>" + "".join(f"<td style='padding:2px 10px'>{cell}</td>" for cell in cells) + "</tr>")
        parts = [
            f"<div class='tpu-nb-sweep'><b>{html.escape(self._title)}</b>: {self._planned} trials, {self._worlds} at a time",
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>",
        ]
        best = self.best_so_far()
        if best is not None and self._comparison is None:
            parts.append(f"<p>best so far: {html.escape(best)}</p>")
        chart = self._chart()
        if chart is not None:
            parts.append(f"<img alt='a curve per trial' src='data:image/png;base64,{base64.b64encode(chart).decode()}'>")
        if self._comparison is not None:
            parts.append(f"<pre>{html.escape(self._comparison.text())}</pre>")
        return "".join(parts) + "</div>"

    def _shown_metrics(self) -> list[str]:
        names = [LOSS]
        if self._metric is not None and self._metric.name != LOSS:
            names.append(self._metric.name)
        return names

    def _chart(self) -> bytes | None:
        """The loss, and the compared metric, of every trial against its steps."""
        return overlay_chart(
            [(name, [(_label(row), row.curves.get(name, [])) for row in self._rows.values()]) for name in self._shown_metrics()]
        )


def _status(row: _Row) -> str:
    """A row's status as shown: a pruned trial's with the step it stopped at."""
    return f"pruned at step {row.step}" if row.status == "pruned" and row.step is not None else row.status


def _label(row: _Row) -> str:
    """A trial's line in the chart: its number, and whether its pruner stopped it."""
    return f"#{row.trial.number}" + (" pruned" if row.status == "pruned" else "")
