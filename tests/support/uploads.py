"""A file upload the way the browser sends it, for ipywidgets 7 and 8."""

from __future__ import annotations

import time

import ipywidgets


def upload_from_browser(widget: ipywidgets.FileUpload, name: str, content: bytes, mime_type: str = "text/csv") -> None:
    """Set a FileUpload's state as the frontend does after the user picks a file."""
    last_modified = int(time.time() * 1000)
    if int(ipywidgets.__version__.split(".")[0]) >= 8:
        # ipywidgets 8: one synced `value` list of files.
        file = {"name": name, "type": mime_type, "size": len(content), "content": memoryview(content), "last_modified": last_modified}
        widget.set_state({"value": [file]})
    else:
        # ipywidgets 7: `metadata` and `data` lists, then `_counter` bumped to say they are complete.
        metadata = {"name": name, "type": mime_type, "size": len(content), "lastModified": last_modified}
        widget.set_state({"metadata": [metadata], "data": [memoryview(content)], "_counter": widget._counter + 1})
