from __future__ import annotations

import base64
import re
from typing import Any

import IPython.display
import pytest
from support.clock import FakeClock

from tpu_nb.events import Heartbeat, Notice, Progress, WorkerStarted
from tpu_nb.progress.state import ProgressSnapshot, RunProgress
from tpu_nb.progress.summary import (
    display_summary,
    render_chart,
    render_summary,
    summary_bundle,
    table_html,
)

PNG_SIGNATURE = b"\x89PNG"
HOSTILE = "<script>alert('x')</script> & co"


def finished_run(
    metrics_at: dict[int, dict[str, float]],
    *,
    title: str = "%%tpu_train",
    status: str = "done",
    detail: str | None = None,
    notice: str | None = None,
) -> ProgressSnapshot:
    """A two-worker run of 30 steps that logged `metrics_at[step]`."""
    clock = FakeClock()
    progress = RunProgress(title, "Colab TPU v2-8", 2, clock=clock)
    for rank in (0, 1):
        progress.on_event(WorkerStarted(rank, 2, 100 + rank, f"xla:{rank}"))
    if notice is not None:
        progress.on_event(Notice(0, notice))
    for step in range(1, 31):
        clock.advance(1.0)
        progress.on_event(Progress(0, step, metrics_at.get(step, {}), max_steps=30, phase="train"))
        for rank in (0, 1):
            progress.on_event(Heartbeat(rank, step, "train", 4, 15.0))
    progress.finish(status, detail)  # type: ignore[arg-type]
    return progress.snapshot()


def training_metrics() -> dict[int, dict[str, float]]:
    metrics = {step: {"loss": 2.0 / step, "learning_rate": 5e-5 * (1 - step / 30)} for step in range(5, 31, 5)}
    for step in (15, 30):
        metrics[step] |= {"eval_loss": 1.0 / step, "eval_accuracy": step / 40}
    return metrics


def text_of(html_text: str) -> str:
    return re.sub(r"<[^>]+>", "", html_text)


def test_summary_shows_the_outcome() -> None:
    summary_html, png = render_summary(finished_run(training_metrics()))

    assert png is not None and png.startswith(PNG_SIGNATURE)
    assert f'src="data:image/png;base64,{base64.b64encode(png).decode()}"' in summary_html
    text = text_of(summary_html)
    for fact in ("done after 30s", "step 30/30 (100%)", "Colab TPU v2-8", "workers 2/2"):
        assert fact in text
    assert "Final: loss 0.06667, eval_loss 0.03333, eval_accuracy 0.75" in text
    assert "4 XLA compilations (15s compiling), stable after warm-up" in text


def test_table_is_trainer_style() -> None:
    table = table_html(finished_run(training_metrics()), max_rows=100)
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", table)
    assert headers == ["Step", "Training Loss", "Validation Loss", "Learning Rate", "Validation Accuracy"]
    rows = re.findall(r"<tr>(.*?)</tr>", table)[1:]
    assert len(rows) == 6
    assert re.findall(r"<td[^>]*>([^<]*)</td>", rows[2]) == ["15", "0.1333", "0.06667", "2.5e-05", "0.375"]
    assert re.findall(r"<td[^>]*>([^<]*)</td>", rows[0])[2] == "—"  # no evaluation at step 5


def test_long_tables_show_the_last_rows() -> None:
    snapshot = finished_run({step: {"loss": 1.0 / step} for step in range(1, 31)})
    table = table_html(snapshot, max_rows=10)
    assert "the last 10 of 30 logged rows" in table
    assert re.findall(r"<tr><td[^>]*>(\d+)</td>", table) == [str(step) for step in range(21, 31)]


def test_all_text_is_escaped() -> None:
    metrics = {10: {"loss": 0.5, f"eval_{HOSTILE}": 1.0}}
    snapshot = finished_run(metrics, title=HOSTILE, status="failed", detail=f"ValueError: {HOSTILE}", notice=HOSTILE)
    summary_html, _ = render_summary(snapshot)

    assert "<script>" not in summary_html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; co" in summary_html
    assert summary_html.count("&lt;script&gt;") == 5  # title, detail, final metric, table header, notice


def test_no_chart_without_anything_to_plot() -> None:
    snapshot = finished_run({}, status="interrupted")
    summary_html, png = render_summary(snapshot)
    assert png is None
    assert render_chart(snapshot) is None
    assert "<img" not in summary_html
    assert "image/png" not in summary_bundle(snapshot)


def test_chart_draws_the_learning_rate_alone() -> None:
    png = render_chart(finished_run({10: {"learning_rate": 1e-4}, 20: {"learning_rate": 5e-5}}))
    assert png is not None and png.startswith(PNG_SIGNATURE)


def test_display_summary_is_one_output_with_html_png_and_text(monkeypatch: pytest.MonkeyPatch) -> None:
    shown: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(IPython.display, "display", lambda *objects, **options: shown.append((objects, options)))

    display_summary(finished_run(training_metrics(), status="timeout", detail="timed out after 30 s"))

    (((bundle,), options),) = shown
    assert options == {"raw": True}
    assert set(bundle) == {"text/html", "image/png", "text/plain"}
    assert base64.b64decode(bundle["image/png"]).startswith(PNG_SIGNATURE)
    assert bundle["text/plain"].splitlines()[:2] == [
        "%%tpu_train timeout after 30s | step 30/30 (100%) | loss 0.06667 | eval_loss 0.03333 | eval_accuracy 0.75 | compilations: 4",
        "timed out after 30 s",
    ]
