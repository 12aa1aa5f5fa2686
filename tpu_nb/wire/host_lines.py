"""Events as JSON lines: how a pod host's `train.py` reaches the notebook, through gcloud or kubectl logs.

On one host, events go through a pipe (`channel`); across hosts the only
path is each host's stdout, which `gcloud ... ssh --worker=all` and
`kubectl logs` relay with everything else the host prints. So each event is
one line: a marker at the start, then JSON naming the host, the event's type
and fields. A line of at most PIPE_BUF bytes is written with one `write()`,
so lines from a host's processes never interleave (bigger events are split
first, `tpu_nb.wire.limits`). Anything else on the stream is plain output,
and so is a line that only looks like an event: its fields are checked
against the event's types before it counts.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import select
import socket
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from tpu_nb.wire.events import (
    CheckpointSaved,
    Diagnosis,
    Event,
    Heartbeat,
    History,
    Notice,
    Output,
    Progress,
    Stalled,
    Stopping,
    WorkerFinished,
    WorkerRaised,
    WorkerStarted,
)
from tpu_nb.wire.limits import fit
from tpu_nb.wire.stacks import StackAnswer
from tpu_nb.wire.worker_exceptions import ExceptionReport

MARKER = "@tpu_nb "
MAX_LINE_BYTES = 1 << 20
"""The longest event line (an exception's report, capped well below); a reader takes longer lines in pieces."""
_MAX_HOST = 1 << 16


HostEnd = Literal["done", "raised", "died", "refused"]
"""How a host's `train.py` ended: its part ran, its code raised (its ExceptionReport came first), a worker died without a
Python exception, or it refused to start (a check on the host failed)."""


@dataclass(frozen=True, slots=True)
class HostEnded:
    """A host's `train.py` is about to exit, and how."""

    status: HostEnd
    detail: str | None = None


HostEvent = Event | ExceptionReport | HostEnded | StackAnswer

_TYPES: dict[str, type[Any]] = {
    kind.__name__: kind
    for kind in (
        WorkerStarted,
        Output,
        WorkerFinished,
        WorkerRaised,
        Progress,
        Heartbeat,
        Diagnosis,
        Stopping,
        CheckpointSaved,
        History,
        Stalled,
        Notice,
        ExceptionReport,
        HostEnded,
        StackAnswer,
    )
}


@dataclass(frozen=True, slots=True)
class HostLine:
    """One line of a host's stream: an event from that host, or plain text (host unknown)."""

    host: int | None
    event: HostEvent | None
    text: str | None = None
    origin: str | None = None  # "hostname:pid" of the host's train.py: tells hosts apart even if they claim one number
    malformed: bool = False  # it started with the marker, but is no event: shown as it is


def encode(host: int, event: HostEvent, origin: str = "") -> str:
    """The line (with its newline) that carries `event` from `host` (its train.py process: `origin`)."""
    fields = dataclasses.asdict(event)
    record = {"host": host, "origin": origin, "type": type(event).__name__, "fields": fields}
    # Not ASCII-escaped: a CJK character takes 3 bytes, not 6, of the line's budget.
    return MARKER + json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=_json_safe) + "\n"


def decode(line: str) -> HostLine:
    """An event line back into its event; any other line is plain text."""
    if not line.startswith(MARKER):
        return HostLine(None, None, line)
    try:
        record = json.loads(line[len(MARKER) :])
        host = _convert(record["host"], int)
        if not 0 <= host < _MAX_HOST:
            raise _Malformed(f"host {host}")
        origin = _convert(record.get("origin"), str | None)
        return HostLine(host, _rebuild(_TYPES[record["type"]], record["fields"]), origin=origin or None)
    except (ValueError, KeyError, TypeError, _Malformed):
        return HostLine(None, None, line, malformed=True)  # cut or garbled on the way, or not ours


class _Malformed(Exception):
    """A field that does not have its event's type."""


def _rebuild(kind: type[Any], fields: Any) -> HostEvent:
    if not isinstance(fields, dict):
        raise _Malformed(kind.__name__)
    hints = typing.get_type_hints(kind)
    names = {field.name for field in dataclasses.fields(kind)}
    if not set(fields) <= names:
        raise _Malformed(f"{kind.__name__} has no field {sorted(set(fields) - names)}")
    event: HostEvent = kind(**{name: _convert(value, hints[name]) for name, value in fields.items()})
    return event


def _convert(value: Any, hint: Any) -> Any:
    """`value` (as JSON gave it) as type `hint`, or `_Malformed`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        for arg in args:
            try:
                return _convert(value, arg)
            except _Malformed:
                continue
        raise _Malformed(f"{value!r} is not {hint}")
    if origin is Literal:
        if value in args:
            return value
        raise _Malformed(f"{value!r} is not one of {args}")
    if hint is type(None) and value is None:
        return None
    if isinstance(hint, type) and issubclass(hint, enum.IntEnum) and isinstance(value, int) and not isinstance(value, bool):
        try:
            return hint(value)  # a code: a StopReason
        except ValueError:
            raise _Malformed(f"{value!r} is not a {hint.__name__}") from None
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint is str and isinstance(value, str):
        return value
    if origin is tuple and isinstance(value, list):
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(item, args[0]) for item in value)
        if len(value) == len(args):
            return tuple(_convert(item, arg) for item, arg in zip(value, args, strict=True))
    if origin is list and isinstance(value, list):
        return [_convert(item, args[0]) for item in value]
    if origin is dict and isinstance(value, dict):
        return {_convert(key, args[0]): _convert(item, args[1]) for key, item in value.items()}
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _rebuild(hint, value)
    raise _Malformed(f"{value!r} is not {hint}")


def _json_safe(value: Any) -> Any:
    """JSON for what json cannot take: numpy and torch scalars by their value, anything else by its text."""
    item = getattr(value, "item", None)
    if callable(item):
        try:
            scalar = item()
        except (TypeError, ValueError, RuntimeError):
            scalar = None  # not a scalar
        if isinstance(scalar, int | float | bool | str):
            return scalar
    return str(value)


class LineWriter:
    """The sending end on a host: what `EventWriter` is on one machine, to a stdout instead of a pipe.

    `on_broken` is called when that stdout breaks: the notebook's gcloud
    ended (its kernel died or restarted) and nobody follows the run any more.
    """

    def __init__(self, fd: int, host: int, on_broken: Callable[[], None] | None = None) -> None:
        self.fd = fd
        self.host = host
        self.origin = f"{socket.gethostname()}:{os.getpid()}"  # taken before the workers fork: theirs too
        self._on_broken = on_broken

    def send(self, event: HostEvent) -> None:
        if isinstance(event, ExceptionReport):
            # Sent alone, after the workers ended: it may take several writes (`ExceptionReport.of` capped it).
            self._write(encode(self.host, event, self.origin).encode())
            return
        for piece in fit(event, self._line_size, select.PIPE_BUF):
            self._write(encode(self.host, piece, self.origin).encode())

    def _line_size(self, event: HostEvent) -> int:
        return len(encode(self.host, event, self.origin).encode())

    def _write(self, data: bytes) -> None:
        try:
            while data:
                written = os.write(self.fd, data)
                data = data[written:]
        except BrokenPipeError:
            if self._on_broken is None:
                raise
            self._on_broken()

    def close(self) -> None:
        os.close(self.fd)
