from __future__ import annotations

import base64
from typing import Any

import IPython
import IPython.display
import ipywidgets as widgets
import pytest
from ipykernel.zmqshell import ZMQInteractiveShell
from IPython.terminal.interactiveshell import TerminalInteractiveShell
from support.clock import FakeClock

from tpu_nb import TpuNbWarning
from tpu_nb.kernel.progress.chart import render_chart
from tpu_nb.kernel.progress.dashboard import (
    CHART_REFRESH_SECONDS,
    STATUS_REFRESH_SECONDS,
    Dashboard,
)
from tpu_nb.kernel.progress.display import make_display
from tpu_nb.kernel.progress.snapshot import STALE_AFTER_SECONDS, ProgressSnapshot
from tpu_nb.kernel.progress.state import ProgressState
from tpu_nb.kernel.progress.text import TextProgress
from tpu_nb.wire.events import Counted, Heartbeat, Notice, Progress, WorkerRaised, WorkerStarted

PNG_SIGNATURE = b"\x89PNG"


class RecordedDisplays:
    """Stands in for IPython.display.display: the outputs a cell would show, in order."""

    def __init__(self) -> None:
        self.outputs: list[Any] = []

    def __call__(self, *objects: Any, display_id: bool | str | None = None, raw: bool = False) -> Any:
        self.outputs.extend(objects)
        if display_id is True:
            return _Slot(self, len(self.outputs) - 1)  # its update() replaces the output in place
        return None


class _Slot:
    def __init__(self, displays: RecordedDisplays, index: int) -> None:
        self.displays = displays
        self.index = index

    def update(self, obj: Any, raw: bool = False) -> None:
        assert raw
        self.displays.outputs[self.index] = obj


def view_of(widget: widgets.Widget) -> dict[str, Any]:
    """The output that shows `widget` (a widget-view bundle, the same for ipywidgets 7 and 8)."""
    return {
        "text/plain": f"{type(widget).__name__}(...)",
        "application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0, "model_id": widget.model_id},
    }


@pytest.fixture
def displays(monkeypatch: pytest.MonkeyPatch) -> RecordedDisplays:
    recorded = RecordedDisplays()
    monkeypatch.setattr(IPython.display, "display", recorded)
    return recorded


@pytest.fixture
def dashboard(clock: FakeClock) -> Dashboard:
    return Dashboard(ProgressState("%%tpu_train <demo>", "Colab TPU v2-8", expected_workers=2, clock=clock))


@pytest.fixture
def chart_renders(monkeypatch: pytest.MonkeyPatch) -> list[ProgressSnapshot]:
    """Counts the dashboard's chart renders (they still happen)."""
    renders: list[ProgressSnapshot] = []

    def counting_render(snapshot: ProgressSnapshot) -> bytes | None:
        renders.append(snapshot)
        return render_chart(snapshot)

    monkeypatch.setattr("tpu_nb.kernel.progress.dashboard.render_chart", counting_render)
    return renders


def start(dashboard: Dashboard) -> None:
    for rank in (0, 1):
        dashboard.on_event(WorkerStarted(rank, 2, 100 + rank, f"xla:{rank}"))


def train(dashboard: Dashboard, clock: FakeClock, steps: range, seconds: float = 0.5) -> None:
    for step in range(steps.start, steps.stop):
        clock.advance(seconds)
        metrics = {"loss": 3.0 / step, "learning_rate": 1e-4} if step % 5 == 0 else {}
        dashboard.on_event(Progress(0, step, metrics, 50, step / 25, "train", Counted(clock.now, step * 16 * 32, step * 16)))
        for rank in (0, 1):
            dashboard.on_event(Heartbeat(rank, step, "train", 3, 20.0))


def test_starts_empty(dashboard: Dashboard) -> None:
    assert "%%tpu_train &lt;demo&gt;" in dashboard.status.value
    assert "starting" in dashboard.status.value
    assert (dashboard.progress_bar.value, dashboard.progress_bar.bar_style) == (0, "")
    assert dashboard.step_label.value == "no step yet"
    assert dashboard.chart.layout.display == "none"
    assert dashboard.table.value == ""


def test_widget_tree_uses_core_widgets_only(dashboard: Dashboard) -> None:
    def walk(widget: widgets.Widget) -> list[widgets.Widget]:
        return [widget, *(child for nested in getattr(widget, "children", ()) for child in walk(nested))]

    tree = walk(dashboard.widget)
    assert {type(widget) for widget in tree} <= {
        widgets.VBox,
        widgets.HBox,
        widgets.HTML,
        widgets.IntProgress,
        widgets.Image,
        widgets.Label,
    }
    for part in (dashboard.status, dashboard.progress_bar, dashboard.chart, dashboard.table, dashboard.worker_rows, dashboard.health):
        assert part in tree
    assert dashboard.chart.format == "png"


def test_shows_training_as_it_happens(dashboard: Dashboard, clock: FakeClock) -> None:
    start(dashboard)
    assert "compiling" in dashboard.status.value
    clock.advance(60.0)
    train(dashboard, clock, range(1, 21))
    dashboard.on_event(Notice(0, "Trainer: optim adamw_torch_fused -> adamw_torch (fused AdamW fails on XLA)"))
    clock.advance(STATUS_REFRESH_SECONDS)
    dashboard.on_event(Heartbeat(1, 20, "train", 3, 20.0))

    assert (dashboard.progress_bar.value, dashboard.progress_bar.max) == (20, 50)
    assert dashboard.step_label.value == "step 20/50 (40%)"
    status = dashboard.status.value
    for fact in ("Colab TPU v2-8", "workers 2/2", "training", "2.0 steps/s", "ETA 15s", "epoch 0.80"):
        assert fact in status
    # The speed on its line: no FLOPs per token given (a loop's report() has none of its own), so no MFU, said why.
    assert "1,024 tokens/s · 32 samples/s · no MFU without FLOPs per token: give --flops-per-token N" in dashboard.speed.value
    assert bytes(dashboard.chart.value).startswith(PNG_SIGNATURE)
    assert dashboard.chart.layout.display is None
    assert "<th" in dashboard.table.value and "Training Loss" in dashboard.table.value
    assert "<td" in dashboard.table.value and "0.15" in dashboard.table.value  # the loss at step 20
    assert "xla:1" in dashboard.worker_rows.value
    assert '<details class="tpu-nb-details">' in dashboard.worker_rows.value  # closed: all is well
    assert "3 compilations, stable · workers 2/2" in dashboard.health.value
    assert "3 XLA compilations" in dashboard.worker_rows.value  # redrawn seldom: opening it lasts
    assert "fused AdamW fails on XLA" in dashboard.notices.value


def test_chart_is_rendered_at_most_once_a_second(dashboard: Dashboard, clock: FakeClock, chart_renders: list[ProgressSnapshot]) -> None:
    start(dashboard)
    clock.advance(10.0)
    for step in range(1, 101):  # a burst of events in one instant
        dashboard.on_event(Progress(0, step, {"loss": 1.0 / step}, max_steps=200))
    assert len(chart_renders) == 1
    assert dashboard.progress_bar.value == 1  # the status is throttled too

    clock.advance(STATUS_REFRESH_SECONDS)
    dashboard.on_event(Progress(0, 101, {"loss": 0.01}, max_steps=200))
    assert dashboard.progress_bar.value == 101
    assert len(chart_renders) == 1

    clock.advance(CHART_REFRESH_SECONDS)
    dashboard.on_event(Heartbeat(0, 101, "train", 3, 20.0))
    assert len(chart_renders) == 2
    clock.advance(CHART_REFRESH_SECONDS)
    dashboard.on_event(Heartbeat(0, 101, "train", 3, 20.0))
    assert len(chart_renders) == 2  # nothing new to draw


def test_display_shows_the_widget_once(dashboard: Dashboard, displays: RecordedDisplays) -> None:
    dashboard.display()
    dashboard.display()
    assert displays.outputs == [view_of(dashboard.widget)]


def test_finish_done_fills_the_bar_and_adds_a_static_summary(dashboard: Dashboard, clock: FakeClock, displays: RecordedDisplays) -> None:
    dashboard.display()
    start(dashboard)
    train(dashboard, clock, range(1, 49))  # the last Progress events were throttled away
    dashboard.finish("done")

    assert (dashboard.progress_bar.value, dashboard.progress_bar.max) == (50, 50)
    assert dashboard.progress_bar.bar_style == "success"
    assert "done" in dashboard.status.value
    (summary,) = displays.outputs  # the summary took the dashboard's place: one view of the run
    assert all(part.comm is None for part in (dashboard.widget, dashboard.progress_bar, dashboard.chart))  # closed
    assert set(summary) == {"text/html", "text/plain", "image/png"}
    assert "tpu-nb-summary" in summary["text/html"]
    assert base64.b64decode(summary["image/png"]).startswith(PNG_SIGNATURE)
    assert summary["text/plain"].startswith("%%tpu_train <demo> done after")


def test_finish_without_display_shows_the_summary_directly(dashboard: Dashboard, clock: FakeClock, displays: RecordedDisplays) -> None:
    start(dashboard)
    dashboard.finish("stopped")
    (summary,) = displays.outputs
    assert "stopped" in summary["text/plain"]
    assert "image/png" not in summary


def test_failure_stays_visible(dashboard: Dashboard, clock: FakeClock, displays: RecordedDisplays) -> None:
    start(dashboard)
    train(dashboard, clock, range(1, 11))
    clock.advance(1.0)
    dashboard.on_event(WorkerRaised(1, "ValueError: bad <shape>"))
    assert "rank 1: ValueError: bad &lt;shape&gt;" in dashboard.detail.value

    dashboard.finish("failed", "Traceback ...\nValueError: bad <shape>")
    assert dashboard.progress_bar.bar_style == "danger"
    assert dashboard.progress_bar.value == 10
    assert "ValueError: bad &lt;shape&gt;" in dashboard.detail.value
    assert "failed" in dashboard.worker_rows.value


@pytest.mark.parametrize("status", ["interrupted", "timeout", "stopped"])
def test_early_ends_are_warnings(dashboard: Dashboard, clock: FakeClock, displays: RecordedDisplays, status: str) -> None:
    start(dashboard)
    train(dashboard, clock, range(1, 11))
    dashboard.finish(status, f"{status} at step 10")  # type: ignore[arg-type]
    assert dashboard.progress_bar.bar_style == "warning"
    assert dashboard.progress_bar.value == 10
    assert f"{status} at step 10" in dashboard.detail.value


def test_silent_workers_are_highlighted(dashboard: Dashboard, clock: FakeClock) -> None:
    start(dashboard)
    train(dashboard, clock, range(1, 6))
    for _ in range(int(STALE_AFTER_SECONDS) + 2):  # only rank 0 keeps reporting
        clock.advance(1.0)
        dashboard.on_event(Heartbeat(0, 5, "train", 3, 20.0))

    assert '<details class="tpu-nb-details" open>' in dashboard.worker_rows.value  # opened by itself
    rows = dashboard.worker_rows.value.split("<tr>")[2:]
    assert "tpu-nb-pill" not in rows[0]
    assert "s ago" in rows[1] and "tpu-nb-pill" in rows[1]
    assert "rank 1 silent 32s" in dashboard.health.value


def test_recompilation_warning_is_shown(dashboard: Dashboard, clock: FakeClock) -> None:
    start(dashboard)
    train(dashboard, clock, range(1, 11))
    for step in range(11, 21):  # every step compiles a new graph
        clock.advance(0.5)
        dashboard.on_event(Progress(0, step, {}, max_steps=50))
        for rank in (0, 1):
            dashboard.on_event(Heartbeat(rank, step, "train", 3 + step - 10, 20.0, compiled_steps=((step, step),)))
    assert "tpu-nb-xla-warning" in dashboard.health.value and "recompiling: 7 of 12 steps" in dashboard.health.value
    assert '<details class="tpu-nb-details" open>' in dashboard.worker_rows.value
    assert "steps after warm-up (step 5), first at step 11 (ranks 0, 1)" in dashboard.worker_rows.value  # redrawn seldom
    assert "padding=&#x27;max_length&#x27;" in dashboard.worker_rows.value


def test_a_failing_chart_warns_and_training_goes_on(dashboard: Dashboard, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_render(snapshot: ProgressSnapshot) -> bytes | None:
        raise RuntimeError("no fonts")

    monkeypatch.setattr("tpu_nb.kernel.progress.dashboard.render_chart", broken_render)
    start(dashboard)
    with pytest.warns(TpuNbWarning, match="no fonts"):
        train(dashboard, clock, range(1, 11))
    assert dashboard.progress_bar.value == 10
    assert dashboard.chart.layout.display == "none"


def test_make_display_picks_widgets_in_a_kernel_and_text_elsewhere(displays: RecordedDisplays, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(IPython, "get_ipython", lambda: object.__new__(TerminalInteractiveShell))
    text = make_display("%%tpu_train", "CPU", 1)
    assert isinstance(text, TextProgress)
    assert displays.outputs == []

    monkeypatch.setattr(IPython, "get_ipython", lambda: object.__new__(ZMQInteractiveShell))
    dashboard = make_display("%%tpu_train", "CPU", 1)
    assert isinstance(dashboard, Dashboard)
    assert displays.outputs == [view_of(dashboard.widget)]
