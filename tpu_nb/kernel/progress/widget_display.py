"""Showing a widget under a display id, so that a later output can replace it in place.

ipywidgets 7 (Colab ships 7.7.1) displays a widget through `_ipython_display_`,
which sends its own output and drops IPython's `display_id`: the widget could
then never be replaced. ipywidgets 8 goes through `_repr_mimebundle_`, which
keeps it. Sending the widget-view bundle (the same in 7 and 8) ourselves
works with both.
"""

from __future__ import annotations

from IPython import display as ipython_display
from ipywidgets import Widget


def display_replaceable(widget: Widget) -> ipython_display.DisplayHandle:
    """Display `widget`; the handle's `update(...)` puts another output in its place."""
    bundle = {
        "text/plain": f"{type(widget).__name__}(...)",
        "application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0, "model_id": widget.model_id},
    }
    handle: ipython_display.DisplayHandle | None = ipython_display.display(bundle, raw=True, display_id=True)
    assert handle is not None, "display(..., display_id=True) returns a handle"
    return handle
