"""Every size limit on what crosses the wire: events cut to fit one atomic write, text capped by bytes.

A worker's event must fit one `write()` of at most PIPE_BUF bytes (pipe or
a pod host's stdout), whatever the user's code logs or prints: 140 eval
metrics from a Trainer, a line of CJK text, an exception with a 20 MB
message. Splitting keeps everything (text in pieces, metrics in several
events of the same step, which the dashboard merges into one row); only a
single item bigger than a whole frame is cut, and a `Notice` says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from tpu_nb.wire.events import History, Notice, Output, Progress
from tpu_nb.wire.stacks import StackAnswer

E = TypeVar("E")
_SHORT = 200  # bytes: text this short is left whole when an event is cut (cutting it would not make it shorter)


def cap_text(text: str, max_bytes: int) -> str:
    """`text` if its UTF-8 fits `max_bytes`, else its head and tail with the size of what was skipped between them."""
    data = text.encode(errors="surrogatepass")
    if len(data) <= max_bytes:
        return text
    keep = max(max_bytes - 40, 2) // 2
    head = data[:keep].decode(errors="ignore")
    tail = data[len(data) - keep :].decode(errors="ignore")
    return f"{head}\n[… {len(data) - len(head.encode()) - len(tail.encode()):,} bytes skipped …]\n{tail}"


def utf8_pieces(text: str, max_bytes: int) -> list[str]:
    """`text` cut into pieces of at most `max_bytes` UTF-8 bytes each, never inside a character."""
    data = text.encode(errors="surrogatepass")
    pieces, start = [], 0
    while start < len(data):
        end = min(start + max_bytes, len(data))
        while end < len(data) and end > start + 1 and data[end] & 0xC0 == 0x80:  # a continuation byte: back off
            end -= 1
        pieces.append(data[start:end].decode(errors="surrogatepass"))
        start = end
    return pieces


def fit(event: E, size: Callable[[Any], int], limit: int) -> list[E | Notice]:
    """`event` as events that each take at most `limit` bytes by `size`: split where nothing is lost, else cut, with a notice."""
    if size(event) <= limit:
        return [event]
    split = _split(event)
    if split is not None:
        return [piece for half in split for piece in fit(half, size, limit)]
    cut = event
    while size(cut) > limit:
        shorter = _shortened(cut)
        if shorter == cut:
            raise ValueError(f"a {type(event).__name__} cannot be cut to {limit} bytes; this is a tpu_nb bug")
        cut = shorter
    rank = getattr(event, "rank", None)
    notice = Notice(rank if isinstance(rank, int) else 0, f"tpu_nb cut a {_described(event)} to fit one {limit}-byte message")
    return [cut, notice]


def _split(event: Any) -> tuple[Any, Any] | None:
    """Two halves of an event that loses nothing when split: printed text, a report's metrics, a host's stack dump."""
    if isinstance(event, Output) and len(event.text) > 1:
        middle = len(event.text) // 2
        return dataclasses.replace(event, text=event.text[:middle]), dataclasses.replace(event, text=event.text[middle:])
    if isinstance(event, StackAnswer) and len(event.text) > 1:
        middle = len(event.text) // 2
        return dataclasses.replace(event, text=event.text[:middle], last=False), dataclasses.replace(event, text=event.text[middle:])
    if isinstance(event, History) and len(event.rows) > 1:
        middle = len(event.rows) // 2
        return dataclasses.replace(event, rows=event.rows[:middle]), dataclasses.replace(event, rows=event.rows[middle:])
    if isinstance(event, Progress) and len(event.metrics) > 1:
        items = list(event.metrics.items())
        middle = len(items) // 2
        return dataclasses.replace(event, metrics=dict(items[:middle])), dataclasses.replace(event, metrics=dict(items[middle:]))
    return None


def _shortened(value: Any) -> Any:
    """The same value with every text in it cut to about half (and long tuples to half their items)."""
    if isinstance(value, str):
        size = len(value.encode(errors="surrogatepass"))
        return cap_text(value, size // 2) if size > _SHORT else value
    if isinstance(value, tuple | list):
        items = value[: max(len(value) // 2, 1)] if len(value) > 4 else value
        return type(value)(_shortened(item) for item in items)
    if isinstance(value, dict):
        return {_shortened(key): item for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{field.name: _shortened(getattr(value, field.name)) for field in dataclasses.fields(value)})
    return value


def _described(event: Any) -> str:
    if isinstance(event, Progress):
        return f"metric name at step {event.step}"
    return {"Diagnosis": "doctor's finding", "Notice": "notice", "Heartbeat": "heartbeat"}.get(type(event).__name__, type(event).__name__)
