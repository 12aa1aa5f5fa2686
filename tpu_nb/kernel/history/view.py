"""`%tpu_runs`: the run log as a table (each run's speed too: tokens/s and MFU), and the curves of the runs named,
overlaid on one chart (`--metric tokens_per_second`: their speed against their steps)."""

from __future__ import annotations

import base64
import html
import time
from collections.abc import Sequence

from tpu_nb.basics.units import format_duration
from tpu_nb.kernel.history.log import THROUGHPUT_CURVE, RunLog
from tpu_nb.kernel.history.run_record import RunRecord
from tpu_nb.kernel.progress.chart import overlay_chart
from tpu_nb.kernel.progress.text import format_count_rate, format_mfu, format_value

LOSS = "loss"


def run_label(record: RunRecord) -> str:
    """ "#12 %%tpu_train" or "#14 trial #2 (lr=3e-05)": what a run is called in the table and the legend."""
    trial = "" if record.trial is None else " (" + " ".join(f"{name}={value!r}" for name, value in record.trial.items()) + ")"
    return f"#{record.number} {record.title}{trial}"


def runs_text(records: Sequence[RunRecord], metric: str) -> str:
    """The runs as plain text, a line each: number, start, title and trial, status, time, final loss and `metric`, speed."""
    if not records:
        return "tpu_nb: no runs logged yet (every run adds its record when it ends)."
    lines = []
    for record in records:
        values = " ".join(f"{name}={format_value(record.final[name])}" for name in _shown(metric) if name in record.final)
        speed = " ".join(f"{name}={value}" for name, value in (("tokens/s", _tokens(record)), ("MFU", _mfu(record))) if value)
        parts = (run_label(record), _when(record), record.status, format_duration(record.seconds), values, speed)
        lines.append("  ".join(part for part in parts if part))
    return "\n".join(lines)


def passed_over_text(log: RunLog, path: str) -> str | None:
    """What `%tpu_runs` passed over in a damaged log, if anything: the lines and the values, with where they are."""
    parts = []
    if log.lines_passed_over:
        parts.append(f"{_count(log.lines_passed_over, 'line')} (no run's record: cut short, damaged or edited by hand)")
    if log.values_passed_over:
        parts.append(
            f"{_count(log.values_passed_over, 'value')} in the records (a metric that is not a number, a curve's point not [step, value])"
        )
    if not parts:
        return None
    return f"tpu_nb: {path}: passed over {' and '.join(parts)}; the runs listed are the rest."


def runs_html(records: Sequence[RunRecord], metric: str, chart: bytes | None) -> str:
    """The runs as a table (best value of `metric` too), with the overlaid curves under it."""
    names = [name for name in _shown(metric) if name != THROUGHPUT_CURVE]  # the tokens/s column shows it
    best = [] if metric == THROUGHPUT_CURVE else [metric]
    head = ["#", "started", "run", "status", "time", "tokens/s", "MFU", *(f"final {name}" for name in names)]
    head += [*(f"best {name}" for name in best), "checkpoints"]
    rows = []
    for record in records:
        trial = "" if record.trial is None else " ".join(f"{name}={value!r}" for name, value in record.trial.items())
        cells = [
            str(record.number),
            _when(record),
            html.escape(record.title + (f" ({trial})" if trial else "")),
            html.escape(record.status),
            format_duration(record.seconds),
            _tokens(record),
            _mfu(record),
            *(format_value(record.final[name]) if name in record.final else "" for name in names),
            *(format_value(record.best[name]) if name in record.best else "" for name in best),
            html.escape(record.checkpoints or ""),
        ]
        rows.append("<tr>" + "".join(f"<td style='padding:2px 10px'>{cell}</td>" for cell in cells) + "</tr>")
    table = (
        "<table><thead><tr>"
        + "".join(f"<th style='padding:2px 10px'>{html.escape(name)}</th>" for name in head)
        + f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    image = "" if chart is None else f"<img alt='the runs overlaid' src='data:image/png;base64,{base64.b64encode(chart).decode()}'>"
    return f"<div class='tpu-nb-runs'>{table}{image}</div>"


def runs_chart(records: Sequence[RunRecord], metric: str) -> bytes | None:
    """The loss (and `metric`) of each run against its steps, a line per run."""
    return overlay_chart([(name, [(run_label(record), record.curves.get(name, ())) for record in records]) for name in _shown(metric)])


def _tokens(record: RunRecord) -> str:
    return "" if record.tokens_per_second is None else format_count_rate(record.tokens_per_second)


def _mfu(record: RunRecord) -> str:
    return "" if record.mfu is None else format_mfu(record.mfu)


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}" if number == 1 else f"{number} {thing}s"


def _shown(metric: str) -> list[str]:
    return [LOSS] if metric == LOSS else [LOSS, metric]


def _when(record: RunRecord) -> str:
    started = time.localtime(record.started)
    today = time.localtime()
    shape = "%H:%M:%S" if started[:3] == today[:3] else "%Y-%m-%d %H:%M"
    return time.strftime(shape, started)
