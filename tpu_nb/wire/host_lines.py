"""Events as JSON lines: how a pod host's `train.py` reaches the notebook, through gcloud or kubectl logs.

On one host, events go through a pipe (`channel`); across hosts the only
path is each host's stdout, which `gcloud ... ssh --worker=all` and
`kubectl logs` relay with everything else the host prints. So each event is
one line: a marker, then JSON naming the host, the event's type and fields.
A line of at most PIPE_BUF bytes is written with one `write()`, so lines
from a host's processes never interleave; anything else on the stream is
plain output.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from dataclasses import dataclass
from typing import Any

from .events import (
    CompileCause,
    Diagnosis,
    Event,
    Heartbeat,
    Notice,
    Output,
    Progress,
    Stopping,
    WorkerFinished,
    WorkerRaised,
    WorkerStarted,
)
from .results import ExceptionReport

MARKER = "@tpu_nb "


@dataclass(frozen=True, slots=True)
class HostEnded:
    """A host's `train.py` is about to exit: "done", "raised" (its ExceptionReport came first), "died" or "refused"."""

    status: str
    detail: str | None = None


HostEvent = Event | ExceptionReport | HostEnded

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
        Notice,
        ExceptionReport,
        HostEnded,
    )
}


@dataclass(frozen=True, slots=True)
class HostLine:
    """One line of a host's stream: an event from that host, or plain text (host unknown)."""

    host: int | None
    event: HostEvent | None
    text: str | None = None
    origin: str | None = None  # "hostname:pid" of the host's train.py: tells hosts apart even if they claim one number


def encode(host: int, event: HostEvent, origin: str = "") -> str:
    """The line (with its newline) that carries `event` from `host` (its train.py process: `origin`)."""
    fields = dataclasses.asdict(event)
    record = {"host": host, "origin": origin, "type": type(event).__name__, "fields": fields}
    return MARKER + json.dumps(record, separators=(",", ":")) + "\n"


def decode(line: str) -> HostLine:
    """An event line back into its event; any other line is plain text."""
    start = line.find(MARKER)
    if start < 0:
        return HostLine(None, None, line)
    try:
        record = json.loads(line[start + len(MARKER) :])
        kind = _TYPES[record["type"]]
        return HostLine(int(record["host"]), _rebuild(kind, record["fields"]), origin=record.get("origin") or None)
    except (ValueError, KeyError, TypeError):
        return HostLine(None, None, line)  # cut or garbled on the way (a relay split it): shown as text


def _rebuild(kind: type[Any], fields: dict[str, Any]) -> HostEvent:
    if kind is Heartbeat:
        fields["causes"] = tuple(CompileCause(**cause) for cause in fields["causes"])
        fields["memory"] = _pair(fields["memory"])
        fields["cache"] = _pair(fields["cache"])
    elif kind is Diagnosis:
        fields["places"] = tuple(fields["places"])
    event: HostEvent = kind(**fields)
    return event


def _pair(value: list[int] | None) -> tuple[int, int] | None:
    return None if value is None else (value[0], value[1])


class LineWriter:
    """The sending end on a host: what `EventWriter` is on one machine, to a stdout instead of a pipe."""

    def __init__(self, fd: int, host: int) -> None:
        self.fd = fd
        self.host = host
        self.origin = f"{socket.gethostname()}:{os.getpid()}"  # taken before the workers fork: theirs too

    def send(self, event: HostEvent) -> None:
        data = encode(self.host, event, self.origin).encode()
        # Events fit PIPE_BUF and go in one atomic write; only an exception's
        # report (sent after the workers ended, alone) may take several.
        while data:
            written = os.write(self.fd, data)
            data = data[written:]

    def close(self) -> None:
        os.close(self.fd)
