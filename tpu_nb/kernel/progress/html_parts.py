"""HTML pieces the live dashboard and the end-of-run summary share: pills, tables, health, notices, detail.

Text inherits the frontend's colour, so it reads in light and dark themes
(JupyterLab, Colab); colour is carried by pills: white text on a background
dark enough for 4.5:1 contrast (WCAG AA), whatever the theme around them.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from tpu_nb.basics.units import format_bytes, format_duration
from tpu_nb.kernel.progress.snapshot import EVAL_PREFIX, TRAINING_LOSS, VALIDATION_LOSS, ProgressSnapshot
from tpu_nb.kernel.progress.text import HealthLevel, format_value, health, health_brief, split_text, throughput_text
from tpu_nb.wire.stacks import StackReport

PILL_TEXT = "#ffffff"
PHASE_COLOURS: dict[str, str] = {
    "starting": "#546e7a",
    "compiling": "#6a1b9a",
    "training": "#1565c0",
    "evaluating": "#00707a",
    "done": "#2e7d32",
    "failed": "#c62828",
    "interrupted": "#8d5300",
    "timeout": "#8d5300",
    "stopped": "#8d5300",
    "pruned": "#8d5300",
}
OTHER_PHASE_COLOUR = "#546e7a"  # a worker phase without a colour of its own
SPEED_COLOUR = "#1565c0"
HEALTH_COLOURS: dict[HealthLevel, str] = {"pending": "#546e7a", "stable": "#2e7d32", "warning": "#8d5300", "unjudged": "#546e7a"}
_CELL = "padding:2px 10px;text-align:right"
_LEFT_CELL = "padding:1px 10px;text-align:left"


def pill(text: str, colour: str) -> str:
    """A short label in white on `colour` (a status, a health level)."""
    return (
        f'<span class="tpu-nb-pill" style="background:{colour};color:{PILL_TEXT};padding:1px 8px;'
        f'border-radius:9px;font-weight:600;white-space:nowrap">{html.escape(text)}</span>'
    )


def phase_colour(phase: str) -> str:
    return PHASE_COLOURS.get(phase, OTHER_PHASE_COLOUR)


def table_html(snapshot: ProgressSnapshot, max_rows: int) -> str:
    """Logged values, Trainer-style: Step | Training Loss | Validation Loss | other metrics (the last `max_rows`)."""
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
    caption = (
        f'<caption style="caption-side:bottom;font-size:85%">the last {len(rows)} of {len(snapshot.history)} logged rows</caption>'
        if hidden
        else ""
    )
    return (
        '<table class="tpu-nb-metrics" style="border-collapse:collapse;font-size:90%">'
        f"{caption}<thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def history_html(snapshot: ProgressSnapshot, max_rows: int) -> str:
    """More of the logged rows, in a box that scrolls (the latest first in view: at the bottom)."""
    return f'<div class="tpu-nb-history" style="max-height:240px;overflow-y:auto">{table_html(snapshot, max_rows)}</div>'


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


def health_lines_html(snapshot: ProgressSnapshot) -> str:
    """The health pill with a short account (compilations, workers, findings) on one line; the newest checkpoint under it."""
    level, _text = health(snapshot)
    line = f'<div class="tpu-nb-xla-{level}">{pill("XLA " + level, HEALTH_COLOURS[level])} {html.escape(health_brief(snapshot))}</div>'
    return line + _checkpoint_html(snapshot)


def throughput_html(snapshot: ProgressSnapshot) -> str:
    """The run's speed on a line of its own: tokens/s, samples/s, MFU (or why none), where a step's time goes; nothing
    before anything was counted or measured."""
    throughput = snapshot.throughput
    parts = [text for text in (throughput_text(throughput),) if text]
    if throughput.split is not None:
        parts.append(split_text(throughput.split))
    if not parts:
        return ""
    return f'<div class="tpu-nb-throughput">{pill("speed", SPEED_COLOUR)} {html.escape(" · ".join(parts))}</div>'


def _checkpoint_html(snapshot: ProgressSnapshot) -> str:
    """The newest verified checkpoint, on a line of its own (nothing without --checkpoint)."""
    if snapshot.checkpoint is None:
        return ""
    return f'<div class="tpu-nb-checkpoint">{pill("saved", "#2e7d32")} {html.escape(snapshot.checkpoint)}</div>'


def health_html(snapshot: ProgressSnapshot) -> str:
    """The full XLA health text (the compile verdict with its causes and fixes, memory, cache)."""
    level, text = health(snapshot)
    marker = f"border-left:4px solid {HEALTH_COLOURS[level]};padding-left:8px"
    return f'<p class="tpu-nb-xla-{level}" style="{marker}">{html.escape(text)}</p>'


def workers_html(snapshot: ProgressSnapshot) -> str:
    """One row per worker: rank, device, step, phase, last heard, compilations (and device memory, where known)."""
    if not snapshot.workers:
        return ""
    with_memory = any(worker.memory is not None for worker in snapshot.workers)
    with_chip = any(worker.chip is not None for worker in snapshot.workers)
    labels = [
        snapshot.worker_noun.capitalize(),
        "Device",
        "Step",
        "Phase",
        "Last heard",
        "Compilations",
        *(["Memory"] if with_memory else []),
        *(["Chip"] if with_chip else []),
    ]
    header = "".join(f'<th style="{_LEFT_CELL}">{label}</th>' for label in labels)
    rows = []
    for worker in snapshot.workers:
        heard = f"{format_duration(worker.seconds_since_heard)} ago"
        cells = [
            html.escape(str(worker.rank)),
            html.escape(worker.device or "—"),
            "—" if worker.step is None else str(worker.step),
            pill(worker.phase, PHASE_COLOURS["failed"]) if worker.phase == "failed" else html.escape(worker.phase),
            pill(heard, PHASE_COLOURS["failed"]) if worker.stale else html.escape(heard),
            html.escape(f"{worker.compile_count} ({format_duration(worker.compile_seconds)})"),
        ]
        if with_memory:
            cells.append(html.escape(_memory(worker.memory)))
        if with_chip:
            cells.append(html.escape(worker.chip or "—"))
        rows.append("<tr>" + "".join(f'<td style="{_LEFT_CELL}">{cell}</td>' for cell in cells) + "</tr>")
    return (
        '<table class="tpu-nb-workers" style="border-collapse:collapse;font-size:85%">'
        f"<thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def doctor_html(snapshot: ProgressSnapshot) -> str:
    """The XLA doctor's findings: what slows the run, the evidence, where, the fix."""
    if not snapshot.diagnoses:
        return ""
    items = []
    for diagnosis in snapshot.diagnoses:
        places = "".join(f"<li><code>{html.escape(place)}</code></li>" for place in diagnosis.places)
        items.append(
            f"<li><strong>{html.escape(diagnosis.title)}</strong>: {html.escape(diagnosis.evidence)}."
            + (f'<ul style="margin:0">{places}</ul>' if places else "")
            + f"<br>Fix: {html.escape(diagnosis.fix)}.</li>"
        )
    marker = f"border-left:4px solid {HEALTH_COLOURS['warning']};padding-left:8px"
    return f'<ul class="tpu-nb-doctor" style="margin:2px 0;{marker};list-style-position:inside">{"".join(items)}</ul>'


def stall_html(report: StackReport | None) -> str:
    """Where every rank is, when the watchdog spoke: the verdict and fix first, then each rank's line, then the whole stacks."""
    if report is None:
        return ""
    rows = []
    for place in report.ranks:
        step = "—" if place.step is None else str(place.step)
        waits = f"<br><small>waiting in <code>{html.escape(place.waits_in)}</code></small>" if place.waits_in else ""
        rows.append(
            f'<tr><td style="{_LEFT_CELL}">{place.rank}</td><td style="{_LEFT_CELL}">{step}</td>'
            f'<td style="{_LEFT_CELL}"><code>{html.escape(place.where or "not in your code")}</code>{waits}</td></tr>'
        )
    unanswered = "".join(f"<li>no stacks from {html.escape(text)}</li>" for text in report.unanswered)
    chips = f"<br>Chips: {html.escape(report.chips)}" if report.chips else ""
    table = (
        '<table class="tpu-nb-stall-ranks" style="border-collapse:collapse;font-size:85%">'
        f'<thead><tr><th style="{_LEFT_CELL}">Rank</th><th style="{_LEFT_CELL}">Step</th><th style="{_LEFT_CELL}">Where</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    stacks = details_html(
        "Every rank's whole stack", f'<pre style="font-size:80%">{html.escape(report.full_stacks())}</pre>', False, "tpu-nb-stacks"
    )
    marker = f"border-left:4px solid {PHASE_COLOURS['failed']};padding-left:8px;margin:4px 0"
    return (
        f'<div class="tpu-nb-stall" style="{marker}"><strong>Where are they?</strong> {html.escape(report.verdict)}'
        f"<br>Fix: {html.escape(report.fix)}<br><small>{html.escape(report.reason)}</small>{chips}"
        f"{table}{'<ul>' + unanswered + '</ul>' if unanswered else ''}{stacks}</div>"
    )


def needs_attention(snapshot: ProgressSnapshot) -> bool:
    """Something in the workers/XLA section deserves to be seen: it opens by itself."""
    return bool(
        snapshot.compiles.level == "warning" or snapshot.diagnoses or snapshot.failures or any(worker.stale for worker in snapshot.workers)
    )


def workers_details_html(snapshot: ProgressSnapshot, open_: bool) -> str:
    """The "Workers and XLA" section the dashboard and the summary show: workers, health and the XLA doctor's words."""
    body = workers_html(snapshot) + health_html(snapshot) + doctor_html(snapshot)
    return details_html("Workers and XLA", body, open_, "tpu-nb-details")


def all_rows_html(snapshot: ProgressSnapshot, table_rows: int, max_rows: int) -> str:
    """Every logged row (the last `max_rows`) behind a click, when there are more than the table's `table_rows`."""
    if len(snapshot.history) <= table_rows:
        return ""
    label = f"All {len(snapshot.history)} logged rows"
    return details_html(label, history_html(snapshot, max_rows), False, "tpu-nb-all-rows")


def details_html(label: str, body: str, open_: bool, css_class: str) -> str:
    """A section the reader opens in the browser (no kernel round trip: during a run the kernel is busy)."""
    opened = " open" if open_ else ""
    return f'<details class="{css_class}"{opened}><summary style="cursor:pointer">{html.escape(label)}</summary>{body}</details>'


def notices_html(notices: Sequence[str]) -> str:
    if not notices:
        return ""
    items = "".join(f"<li>{html.escape(notice)}</li>" for notice in notices)
    return f'<ul class="tpu-nb-notices" style="margin:2px 0;font-size:90%">{items}</ul>'


def detail_html(detail: str, colour: str) -> str:
    marker = f"border-left:4px solid {colour};padding-left:8px"
    return f'<pre style="{marker};white-space:pre-wrap;margin:4px 0">{html.escape(detail)}</pre>'


def _memory(memory: tuple[int, int] | None) -> str:
    if memory is None:
        return "—"
    used, limit = memory
    return f"{format_bytes(used)} / {format_bytes(limit)}"


def _title(name: str) -> str:
    # Not str.title(): it would lower the rest of each word ("rougeL" -> "Rougel").
    return " ".join(word[:1].upper() + word[1:] for word in name.split("_"))
