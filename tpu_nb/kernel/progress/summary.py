"""The end-of-run summary: plain output (HTML with the chart, PNG, text), not widget state.

So a saved notebook, GitHub's viewer or an nbconvert export still shows how
the run ended.
"""

from __future__ import annotations

import base64
import html

from .chart import render_chart
from .html_parts import STATUS_COLOURS, detail_html, doctor_html, health_html, notices_html, table_html
from .state import ProgressSnapshot
from .text import diagnosis_text, final_line, final_metrics, format_duration, format_value, health, step_text, workers_text

SUMMARY_TABLE_ROWS = 100


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
    parts += [table_html(snapshot, SUMMARY_TABLE_ROWS), health_html(snapshot), doctor_html(snapshot), notices_html(snapshot.notices)]
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
    lines += [f"XLA doctor: {diagnosis_text(diagnosis)}" for diagnosis in snapshot.diagnoses]
    lines += [f"note: {notice}" for notice in snapshot.notices]
    return "\n".join(lines)
