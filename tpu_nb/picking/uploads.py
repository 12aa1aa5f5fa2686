"""What a `FileUpload` widget holds, the same on ipywidgets 7 and 8.

ipywidgets 8 holds a tuple of {"name", "type", "size", "content"
(memoryview), "last_modified"}; ipywidgets 7.x (Colab ships 7.7.1) holds a
dict of file name -> {"metadata": {"name", "type", "size", ...}, "content":
bytes}. Both arrive as changes of the widget's `value` trait.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class UploadedFile:
    name: str
    content: bytes


def uploaded_files(value: Any) -> tuple[UploadedFile, ...]:
    """The files in a `FileUpload.value`, in the order the browser sent them."""
    if isinstance(value, Mapping):  # ipywidgets 7
        return tuple(UploadedFile(item["metadata"]["name"], bytes(item["content"])) for item in value.values())
    return tuple(UploadedFile(item["name"], bytes(item["content"])) for item in value)  # ipywidgets 8
