"""The training chart."""

from __future__ import annotations

from support.finished_runs import PNG_SIGNATURE, finished_run, training_metrics

from tpu_nb.kernel.progress.chart import render_chart


def test_chart_draws_the_learning_rate_alone() -> None:
    png = render_chart(finished_run({10: {"learning_rate": 1e-4}, 20: {"learning_rate": 5e-5}}))
    assert png is not None and png.startswith(PNG_SIGNATURE)


def test_chart_draws_losses_evaluation_and_learning_rate_side_by_side() -> None:
    png = render_chart(finished_run(training_metrics()))
    assert png is not None and png.startswith(PNG_SIGNATURE)
    width = int.from_bytes(png[16:20], "big")  # the PNG header's width field
    assert width > int.from_bytes(render_chart(finished_run({10: {"loss": 1.0}}))[16:20], "big")  # type: ignore[index]
