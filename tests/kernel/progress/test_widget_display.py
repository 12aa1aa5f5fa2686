"""A widget shown under a display id, replaceable in place (ipywidgets 7 drops display ids of widgets it shows itself)."""

from __future__ import annotations

from typing import Any

import IPython.display
import ipywidgets as widgets
import pytest

from tpu_nb.kernel.progress.widget_display import display_replaceable


def test_the_widget_view_is_displayed_raw_with_a_display_id(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    handle = IPython.display.DisplayHandle("replace-me")
    monkeypatch.setattr(IPython.display, "display", lambda *objects, **options: calls.append((objects, options)) or handle)
    widget = widgets.HTML("hello")

    assert display_replaceable(widget) is handle
    [((bundle,), options)] = calls
    assert options == {"raw": True, "display_id": True}
    assert bundle["application/vnd.jupyter.widget-view+json"] == {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}
