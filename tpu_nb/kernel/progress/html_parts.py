"""HTML pieces the live dashboard and the end-of-run summary share: metrics table, health, notices, detail."""

from __future__ import annotations

import html
from collections.abc import Sequence

from .state import EVAL_PREFIX, TRAINING_LOSS, VALIDATION_LOSS, ProgressSnapshot
from .text import format_value, health

STATUS_COLOURS: dict[str, str] = {
    "done": "#2e7d32",
    "failed": "#c62828",
    "interrupted": "#b26a00",
    "timeout": "#b26a00",
    "stopped": "#b26a00",
}
_HEALTH_COLOURS = {"pending": "#607d8b", "stable": "#2e7d32", "warning": "#b26a00"}
_CELL = "padding:2px 10px;text-align:right"


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
    return f'<ul class="tpu-nb-doctor" style="margin:2px 0;color:{_HEALTH_COLOURS["warning"]}">{"".join(items)}</ul>'


def notices_html(notices: Sequence[str]) -> str:
    if not notices:
        return ""
    items = "".join(f"<li>{html.escape(notice)}</li>" for notice in notices)
    return f'<ul class="tpu-nb-notices" style="margin:2px 0;color:#455a64">{items}</ul>'


def detail_html(detail: str, colour: str) -> str:
    return f'<pre style="color:{colour};white-space:pre-wrap;margin:4px 0">{html.escape(detail)}</pre>'


def _title(name: str) -> str:
    # Not str.title(): it would lower the rest of each word ("rougeL" -> "Rougel").
    return " ".join(word[:1].upper() + word[1:] for word in name.split("_"))
