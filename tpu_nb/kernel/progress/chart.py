"""The training chart: losses, evaluation metrics and the learning rate as a PNG.

Drawn for the live dashboard (about once a second) and for the end-of-run summary.
The kernel cannot know the page's theme (JupyterLab light or dark, classic
Notebook, Colab's dark mode), so the PNG is transparent and every colour in
it reads on white and on near-black alike.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

from tpu_nb.kernel.progress.html_parts import column_label
from tpu_nb.kernel.progress.snapshot import EVAL_PREFIX, LEARNING_RATE, TRAINING_LOSS, VALIDATION_LOSS, ProgressSnapshot

_CHART_POINTS = 1000  # per line: more only slows rendering down, at no visible gain
_CHART_DPI = 100
# A mid grey for text, ticks, spines and grid: about 4:1 contrast on white and
# 4.8:1 on JupyterLab's dark #111111 (black or white text would vanish on one of them).
_INK = "#808080"
# Line colours of at least 3:1 contrast (WCAG's for graphics) on white, on #111111 and on #383838.
_LINE_COLOURS = ["#1e88e5", "#e6550d", "#31a354", "#a06cd5", "#009999", "#c08000"]


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
        axes.set_prop_cycle(color=_LINE_COLOURS)
        for name in names:
            steps, values = _series(snapshot, name)
            marker = "o" if name.startswith(EVAL_PREFIX) else None
            axes.plot(steps, values, marker=marker, markersize=3, linewidth=1.4, label=_short_name(name))
        _style(axes, title)
        if len(names) > 1:
            axes.legend(fontsize=8, frameon=False, labelcolor=_INK)  # a legend's frame is an opaque white box
    figure.subplots_adjust(left=0.08, right=0.98, bottom=0.2, top=0.88, wspace=0.3)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", transparent=True)  # the page's own background shows through
    return buffer.getvalue()


def _style(axes: Any, title: str) -> None:
    axes.set_title(title, fontsize=10, color=_INK)
    axes.set_xlabel("step", fontsize=9, color=_INK)
    axes.tick_params(labelsize=8, colors=_INK)  # the labels' colour also colours the "1e-5" offset text
    for spine in axes.spines.values():
        spine.set_edgecolor(_INK)
    axes.grid(color=_INK, alpha=0.3)
    axes.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4))


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


Curve = tuple[str, Sequence[tuple[int, float]]]
"""A line of an overlay: its label and its (step, value) points, as the run log and a sweep's board keep them."""


def overlay_chart(panels: Sequence[tuple[str, Sequence[Curve]]]) -> bytes | None:
    """A panel per metric with a line per run or trial (a sweep's trials, `%tpu_runs`' runs), as a transparent PNG."""
    panels = [(title, curves) for title, curves in panels if any(points for _, points in curves)]
    if not panels:
        return None
    from matplotlib.figure import Figure

    figure = Figure(figsize=(3.8 * len(panels) + 1.4, 2.8), dpi=_CHART_DPI)
    for axes, (title, curves) in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels, strict=True):
        for index, (label, points) in enumerate(curves):
            if points:
                steps, values = zip(*points, strict=True)
                style = "-" if index < len(_LINE_COLOURS) else "--"  # past the colours, dashed: no two lines look alike
                axes.plot(steps, values, style, color=_LINE_COLOURS[index % len(_LINE_COLOURS)], linewidth=1.3, label=label[:40])
        _style(axes, title)
        axes.legend(fontsize=7, frameon=False, labelcolor=_INK, ncol=2 if len(curves) > 6 else 1)
    figure.subplots_adjust(left=0.08, right=0.98, bottom=0.2, top=0.88, wspace=0.3)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", transparent=True)
    return buffer.getvalue()
