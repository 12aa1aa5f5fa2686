"""The training chart."""

from __future__ import annotations

import io

import numpy as np
from matplotlib.image import imread
from support.finished_runs import PNG_SIGNATURE, finished_run, training_metrics

from tpu_nb.kernel.progress.chart import overlay_chart, render_chart

WHITE, JUPYTERLAB_DARK = (1.0, 1.0, 1.0), (0x11 / 255, 0x11 / 255, 0x11 / 255)
GRAPHICS_CONTRAST = 3.0  # WCAG's minimum for graphics and large text


def test_chart_draws_the_learning_rate_alone() -> None:
    png = render_chart(finished_run({10: {"learning_rate": 1e-4}, 20: {"learning_rate": 5e-5}}))
    assert png is not None and png.startswith(PNG_SIGNATURE)


def test_chart_draws_losses_evaluation_and_learning_rate_side_by_side() -> None:
    png = render_chart(finished_run(training_metrics()))
    assert png is not None and png.startswith(PNG_SIGNATURE)
    width = int.from_bytes(png[16:20], "big")  # the PNG header's width field
    assert width > int.from_bytes(render_chart(finished_run({10: {"loss": 1.0}}))[16:20], "big")  # type: ignore[index]


def test_chart_background_is_transparent_so_the_page_shows_through() -> None:
    pixels = _pixels(render_chart(finished_run(training_metrics())))
    alpha = pixels[..., 3]
    assert [alpha[0, 0], alpha[0, -1], alpha[-1, 0], alpha[-1, -1]] == [0, 0, 0, 0]
    assert (alpha == 0).mean() > 0.8, "most of the chart is background: no box of any colour"


def test_chart_text_and_lines_read_on_white_and_on_a_dark_page() -> None:
    pixels = _pixels(render_chart(finished_run(training_metrics())))
    ink = pixels[pixels[..., 3] == 1.0][:, :3]  # fully opaque: text, ticks, spines, lines (edges are blended)
    assert len(ink) > 1000
    assert not (ink == 1.0).all(axis=1).any(), "pure white ink vanishes on a light page"
    assert not (ink == 0.0).all(axis=1).any(), "pure black ink vanishes on a dark page"
    for page in (WHITE, JUPYTERLAB_DARK):
        worst = _contrast(ink, np.array(page)).min()
        assert worst >= GRAPHICS_CONTRAST, f"ink at {worst:.2f}:1 on {page}"
    lines = ink[ink.max(axis=1) - ink.min(axis=1) > 0.2]  # coloured, not the grey of the text
    assert len(lines) > 100, "the lines are drawn in colour"


def test_an_overlay_has_a_panel_per_metric_with_points_and_a_line_per_run() -> None:
    run_a, run_b, unseen = ("#0", [(1, 2.0), (2, 1.5), (3, 1.2)]), ("#1", [(1, 2.5), (2, 2.0)]), ("#2", [])
    assert overlay_chart([("loss", [unseen]), ("eval_loss", [unseen])]) is None  # nothing reported yet: no chart
    png = overlay_chart([("loss", [run_a, run_b, unseen]), ("eval_loss", [unseen])])
    assert png is not None and png.startswith(PNG_SIGNATURE)
    assert png == overlay_chart([("loss", [run_a, run_b])])  # the panel and the run without points are left out
    lines = _pixels(png)[..., :3]
    assert (lines.max(axis=2) - lines.min(axis=2) > 0.2).sum() > 100, "the runs' lines are drawn in colour"


def _pixels(png: bytes | None) -> np.ndarray:
    assert png is not None
    pixels = imread(io.BytesIO(png), format="png")  # RGBA floats in 0..1
    assert pixels.shape[2] == 4
    return pixels


def _contrast(colours: np.ndarray, page: np.ndarray) -> np.ndarray:
    """WCAG contrast ratio of each RGB row of `colours` against the colour `page`."""

    def luminance(rgb: np.ndarray) -> np.ndarray:
        linear = np.where(rgb <= 0.03928, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
        return linear @ np.array([0.2126, 0.7152, 0.0722])

    ink, background = luminance(colours), luminance(page)
    return (np.maximum(ink, background) + 0.05) / (np.minimum(ink, background) + 0.05)
