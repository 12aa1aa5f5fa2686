"""The end-of-run summary: one output of HTML (chart included), PNG and text."""

from __future__ import annotations

import base64
import re
from typing import Any

import IPython.display
import pytest
from support.finished_runs import PNG_SIGNATURE, finished_run, training_metrics

from tpu_nb.kernel.progress.chart import render_chart
from tpu_nb.kernel.progress.summary import display_summary, render_summary, summary_bundle

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
