"""The end-of-run summary: plain output (HTML with the chart, PNG, text), not widget state.

So a saved notebook, GitHub's viewer or an nbconvert export still shows how
the run ended.
"""

from __future__ import annotations

import base64
import html

from tpu_nb.basics.units import format_duration
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
from tpu_nb.kernel.progress.snapshot import ProgressSnapshot
from tpu_nb.kernel.progress.text import (
    diagnosis_text,
    final_line,
    final_metrics,
    format_value,
    health,
    split_text,
    step_text,
    throughput_text,
    workers_text,
)

SUMMARY_TABLE_ROWS = 8


def render_summary(snapshot: ProgressSnapshot) -> tuple[str, bytes | None]:
    """The end-of-run summary as HTML (chart embedded) and the chart PNG (None: nothing to plot).

    As compact as the live dashboard it replaces: the chart beside the last
    logged rows (all of them a click away), one health line, and details
    that are open when something needs attention.
    """
    png = render_chart(snapshot)
    headline = (
        f"<strong>{html.escape(snapshot.title)}</strong> {pill(snapshot.phase, phase_colour(snapshot.phase))}"
        f" after {format_duration(snapshot.elapsed)}"
        f" · {html.escape(step_text(snapshot))} · {html.escape(snapshot.runtime_label)}"
        f" · {html.escape(workers_text(snapshot))}"
    )
    parts = [f"<p>{headline}</p>"]
    if snapshot.detail:
        parts.append(detail_html(snapshot.detail, phase_colour(snapshot.phase)))
    metrics = final_metrics(snapshot)
    if metrics:
        listed = ", ".join(f"{html.escape(name)} <strong>{format_value(value)}</strong>" for name, value in metrics)
        parts.append(f"<p>Final: {listed}</p>")
    parts.append(throughput_html(snapshot))
    side_by_side = []
    if png is not None:
        # Frontends show only the richest type of an output (HTML here), so the chart goes in the HTML too.
        encoded = base64.b64encode(png).decode("ascii")
        side_by_side.append(f'<img src="data:image/png;base64,{encoded}" alt="training chart" style="max-width:62%;height:auto">')
    if snapshot.history:
        values = table_html(snapshot, SUMMARY_TABLE_ROWS) + all_rows_html(snapshot, SUMMARY_TABLE_ROWS, len(snapshot.history))
        side_by_side.append(f'<div style="flex:1 1 280px">{values}</div>')
    if side_by_side:
        parts.append(f'<div style="display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start">{"".join(side_by_side)}</div>')
    parts.append(stall_html(snapshot.stall))  # a run stopped while it was stuck: where it was stays in the notebook
    parts.append(health_lines_html(snapshot))
    parts += [workers_details_html(snapshot, needs_attention(snapshot)), notices_html(snapshot.notices)]
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
    if snapshot.stall is not None:
        lines.append(f"Where were they? {snapshot.stall}")
    speed = throughput_text(snapshot.throughput)
    if speed is not None:
        lines.append(f"speed: {speed}")
    if snapshot.throughput.split is not None:
        lines.append(f"time: {split_text(snapshot.throughput.split)}")
    lines.append(health(snapshot)[1])
    if snapshot.checkpoint is not None:
        lines.append(snapshot.checkpoint)
    lines += [f"XLA doctor: {diagnosis_text(diagnosis)}" for diagnosis in snapshot.diagnoses]
    lines += [f"note: {notice}" for notice in snapshot.notices]
    return "\n".join(lines)
