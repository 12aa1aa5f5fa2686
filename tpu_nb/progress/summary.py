"""Static views of a snapshot: the chart PNG, HTML pieces and the end-of-run summary.

The summary is plain output (HTML + PNG + text), not widget state, so a saved
notebook, GitHub's viewer or an nbconvert export still shows how the run
ended. The dashboard reuses the chart and the HTML pieces.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Sequence

from .state import EVAL_PREFIX, LEARNING_RATE, TRAINING_LOSS, VALIDATION_LOSS, ProgressSnapshot
from .text import final_line, final_metrics, format_duration, format_value, health, step_text, workers_text

SUMMARY_TABLE_ROWS = 100
STATUS_COLOURS: dict[str, str] = {
    "done": "#2e7d32",
    "failed": "#c62828",
    "interrupted": "#b26a00",
    "timeout": "#b26a00",
    "stopped": "#b26a00",
}
_CHART_POINTS = 1000  # per line: more only slows rendering down, at no visible gain
_CHART_DPI = 100
_HEALTH_COLOURS = {"pending": "#607d8b", "stable": "#2e7d32", "warning": "#b26a00"}
_CELL = "padding:2px 10px;text-align:right"


def render_summary(snapshot: ProgressSnapshot) -> tuple[str, bytes | None]:
    """The end-of-run summary as HTML (chart embedded) and the chart PNG (None: nothing to plot)."""
    png = render_chart(snapshot)
    colour = STATUS_COLOURS.get(snapshot.phase, "#455a64")  # a live snapshot has no final status yet
    headline = (
        f'<strong>{html.escape(snapshot.title)}</strong>: <strong style="color:{colour}">'
        f"{html.escape(snapshot.phase)}</strong> after {format_duration(snapshot.elapsed)}"
        f" · {html.escape(step_text(snapshot))} · {html.escape(snapshot.runtime_label)}"
        f" · {html.escape(workers_text(snapshot))}"
    )
    parts = [f"<p>{headline}</p>"]
    if snapshot.detail:
        parts.append(detail_html(snapshot.detail, colour))
    metrics = final_metrics(snapshot)
    if metrics:
        listed = ", ".join(f"{html.escape(name)} <strong>{format_value(value)}</strong>" for name, value in metrics)
        parts.append(f"<p>Final: {listed}</p>")
    if png is not None:
        # Frontends show only the richest type of an output (HTML here), so the chart goes in the HTML too.
        encoded = base64.b64encode(png).decode("ascii")
        parts.append(f'<img src="data:image/png;base64,{encoded}" alt="training chart">')
    parts += [table_html(snapshot, SUMMARY_TABLE_ROWS), health_html(snapshot), notices_html(snapshot.notices)]
    return f'<div class="tpu-nb-summary">{"".join(parts)}</div>', png


def summary_bundle(snapshot: ProgressSnapshot) -> dict[str, str]:
    """The summary as one display output: text/html, image/png (base64) and text/plain."""
    summary_html, png = render_summary(snapshot)
    bundle = {"text/html": summary_html, "text/plain": summary_text(snapshot)}
    if png is not None:
        bundle["image/png"] = base64.b64encode(png).decode("ascii")
    return bundle


def display_summary(snapshot: ProgressSnapshot) -> None:
    """Display the end-of-run summary as one output in the current cell."""
    from IPython.display import display  # imported here: rendering alone needs no IPython

    display(summary_bundle(snapshot), raw=True)


def summary_text(snapshot: ProgressSnapshot) -> str:
    lines = [final_line(snapshot)]
    if snapshot.detail:
        lines.append(snapshot.detail)
    lines.append(health(snapshot)[1])
    lines += [f"note: {notice}" for notice in snapshot.notices]
    return "\n".join(lines)


def render_chart(snapshot: ProgressSnapshot) -> bytes | None:
    """Losses, evaluation metrics and the learning rate as a PNG (None: nothing to plot)."""
    panels = _chart_panels(snapshot)
    if not panels:
        return None
    # Figure, not pyplot: no global figure registry, no interference with the inline backend.
    from matplotlib.figure import Figure

    figure = Figure(figsize=(3.2 * len(panels) + 1.0, 2.6), dpi=_CHART_DPI)
    axes_list = figure.subplots(1, len(panels), squeeze=False)[0]
    for axes, (title, names) in zip(axes_list, panels, strict=True):
        for name in names:
            steps, values = _series(snapshot, name)
            marker = "o" if name.startswith(EVAL_PREFIX) else None
            axes.plot(steps, values, marker=marker, markersize=3, linewidth=1.4, label=_short_name(name))
        axes.set_title(title, fontsize=10)
        axes.set_xlabel("step", fontsize=9)
        axes.tick_params(labelsize=8)
        axes.grid(alpha=0.3)
        axes.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))
        if len(names) > 1:
            axes.legend(fontsize=8)
    figure.subplots_adjust(left=0.08, right=0.98, bottom=0.2, top=0.88, wspace=0.3)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def table_html(snapshot: ProgressSnapshot, max_rows: int) -> str:
    """Logged values, Trainer-style: Step | Training Loss | Validation Loss | other metrics (last rows only)."""
    if not snapshot.history:
        return ""
    names = table_columns(snapshot.metric_names)
    header = "".join(f'<th style="{_CELL}">{html.escape(label)}</th>' for label in ["Step", *map(column_label, names)])
    rows = []
    for row in snapshot.history[-max_rows:]:
        cells = [str(row.step) if row.step is not None else "—"]
        cells += [format_value(row.values[name]) if name in row.values else "—" for name in names]
        rows.append("<tr>" + "".join(f'<td style="{_CELL}">{html.escape(cell)}</td>' for cell in cells) + "</tr>")
    hidden = len(snapshot.history) - len(rows)
    caption = f"<caption>the last {len(rows)} of {len(snapshot.history)} logged rows</caption>" if hidden else ""
    return (
        '<table class="tpu-nb-metrics" style="border-collapse:collapse;font-size:90%">'
        f"{caption}<thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def table_columns(metric_names: Sequence[str]) -> list[str]:
    """Training loss, validation loss, then the other metrics in the order they first appeared."""
    leading = [name for name in (TRAINING_LOSS, VALIDATION_LOSS) if name in metric_names]
    return leading + [name for name in metric_names if name not in leading]


def column_label(name: str) -> str:
    """ "loss" -> "Training Loss", "eval_accuracy" -> "Validation Accuracy", "grad_norm" -> "Grad Norm"."""
    if name == TRAINING_LOSS:
        return "Training Loss"
    if name.startswith(EVAL_PREFIX):
        return "Validation " + _title(name.removeprefix(EVAL_PREFIX))
    return _title(name)


def health_html(snapshot: ProgressSnapshot) -> str:
    level, text = health(snapshot)
    weight = "bold" if level == "warning" else "normal"
    return f'<p class="tpu-nb-xla-{level}" style="color:{_HEALTH_COLOURS[level]};font-weight:{weight}">{html.escape(text)}</p>'


def notices_html(notices: Sequence[str]) -> str:
    if not notices:
        return ""
    items = "".join(f"<li>{html.escape(notice)}</li>" for notice in notices)
    return f'<ul class="tpu-nb-notices" style="margin:2px 0;color:#455a64">{items}</ul>'


def detail_html(detail: str, colour: str) -> str:
    return f'<pre style="color:{colour};white-space:pre-wrap;margin:4px 0">{html.escape(detail)}</pre>'


def _chart_panels(snapshot: ProgressSnapshot) -> list[tuple[str, list[str]]]:
    names = snapshot.metric_names
    losses = [name for name in (TRAINING_LOSS, VALIDATION_LOSS) if name in names]
    evaluation = [name for name in names if name.startswith(EVAL_PREFIX) and name != VALIDATION_LOSS]
    evaluation_title = column_label(evaluation[0]) if len(evaluation) == 1 else "Validation metrics"
    learning_rate = [LEARNING_RATE] if LEARNING_RATE in names else []
    candidates = [("Loss", losses), (evaluation_title, evaluation), ("Learning rate", learning_rate)]
    return [(title, panel) for title, panel in candidates if panel]


def _series(snapshot: ProgressSnapshot, name: str) -> tuple[list[int], list[float]]:
    points = [
        (row.step, row.values[name])
        for row in snapshot.history
        if row.step is not None and name in row.values and math.isfinite(row.values[name])
    ]
    stride = math.ceil(len(points) / _CHART_POINTS) if points else 1
    thinned = points[::stride]
    if points and thinned[-1] is not points[-1]:
        thinned.append(points[-1])  # always show the latest value
    return [step for step, _ in thinned], [value for _, value in thinned]


def _short_name(name: str) -> str:
    return {TRAINING_LOSS: "training", VALIDATION_LOSS: "validation"}.get(name, name.removeprefix(EVAL_PREFIX))


def _title(name: str) -> str:
    # Not str.title(): it would lower the rest of each word ("rougeL" -> "Rougel").
    return " ".join(word[:1].upper() + word[1:] for word in name.split("_"))
