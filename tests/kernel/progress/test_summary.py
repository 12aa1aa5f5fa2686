"""The end-of-run summary: one output of HTML (chart included), PNG and text."""

from __future__ import annotations

import base64
import re
from dataclasses import replace
from typing import Any

import IPython.display
import pytest
from support.finished_runs import PNG_SIGNATURE, finished_run, training_metrics

from tpu_nb.kernel.progress.chart import render_chart
from tpu_nb.kernel.progress.summary import SUMMARY_TABLE_ROWS, display_summary, render_summary, summary_bundle, summary_text
from tpu_nb.kernel.progress.throughput import OFF_TPU, Throughput, TimeSplit
from tpu_nb.wire.events import Diagnosis

HOSTILE = "<script>alert('x')</script> & co"


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


def test_the_runs_speed_and_where_its_steps_went_are_in_the_summary() -> None:
    split = TimeSplit(0.12, 0.006, 0.096, 0.018)
    speed = Throughput(tokens_per_second=24_680.0, samples_per_second=12.0, chips=8, mfu=0.385, split=split)
    snapshot = replace(finished_run(training_metrics()), throughput=speed)
    said = "24,680 tokens/s (3,085 per chip) · 12 samples/s · MFU 38.5%"
    where = "a step 120 ms: waiting for input 6 ms (5%), the device 96 ms (80%), the host 18 ms (15%)"
    assert f"{said} · {where}" in text_of(render_summary(snapshot)[0])
    assert f"speed: {said}\ntime: {where}" in summary_text(snapshot)
    cpu = replace(snapshot, throughput=Throughput(tokens_per_second=1_500.0, no_mfu=OFF_TPU))
    assert f"speed: 1,500 tokens/s · {OFF_TPU}" in summary_text(cpu)  # why there is no MFU
    assert "tpu-nb-throughput" not in render_summary(finished_run(training_metrics()))[0]  # nothing counted: no line


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


def test_the_summary_is_compact_the_chart_beside_the_last_rows_and_all_rows_a_click_away() -> None:
    metrics = {step: {"loss": 1.0 / step} for step in range(1, 31)}
    summary_html, _ = render_summary(finished_run(metrics))
    visible, _, rest = summary_html.partition('<details class="tpu-nb-all-rows">')
    assert visible.count("<tr>") == SUMMARY_TABLE_ROWS + 1  # header and the last rows
    assert "the last 8 of 30 logged rows" in text_of(visible)
    assert rest.partition("</details>")[0].count("<tr>") == 31  # the header and every row, in a closed section
    assert 'style="display:flex;flex-wrap:wrap' in visible and visible.index("<img") < visible.index("tpu-nb-metrics")
    assert '<details class="tpu-nb-details">' in summary_html  # workers and XLA: closed, all is well


def test_the_workers_and_xla_section_is_open_when_the_doctor_found_something() -> None:
    finding = Diagnosis(0, "host-reads", "Host syncs", "1.0 reads per step", ("In [3], line 9: loss.item()",), "report(loss=...)", 30)
    summary_html, _ = render_summary(replace(finished_run(training_metrics()), diagnoses=(finding,)))
    assert '<details class="tpu-nb-details" open>' in summary_html
    assert "XLA doctor: 1 finding" in text_of(summary_html)
    assert "In [3], line 9: loss.item()" in summary_html


def test_the_newest_checkpoint_is_in_the_summary_html_and_text() -> None:
    snapshot = replace(finished_run(training_metrics()), checkpoint=f"checkpoint at step 30 verified (1.0 MiB, 0.5s) {HOSTILE}")
    bundle = summary_bundle(snapshot)
    assert f"checkpoint at step 30 verified (1.0 MiB, 0.5s) {HOSTILE}" in bundle["text/plain"].splitlines()
    assert "<script>" not in bundle["text/html"] and "checkpoint at step 30 verified" in text_of(bundle["text/html"])
    assert "checkpoint at step" not in summary_bundle(finished_run(training_metrics()))["text/plain"]
