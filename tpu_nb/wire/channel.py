"""A one-way event pipe from many forked processes to the kernel.

Every event is one length-prefixed pickle written with a single `write()` of
at most PIPE_BUF bytes. POSIX makes such writes atomic, so any number of
workers (and threads) can share the pipe without a lock, and a worker killed
mid-run can never leave half a message that would block the reader. A bigger
event is split (or cut) to fit first (`tpu_nb.wire.limits`).
"""

from __future__ import annotations

import os
import pickle
import select
import struct
from typing import Protocol

from tpu_nb.wire.events import Event
from tpu_nb.wire.limits import fit

_HEADER = struct.Struct("<I")
MAX_FRAME = select.PIPE_BUF  # 4096 on Linux
_MAX_READS_PER_CALL = 16


class EventSink(Protocol):
    """Where a worker sends its events: this pipe, or a pod host's stdout (`host_lines.LineWriter`)."""

    def send(self, event: Event) -> None: ...


class EventWriter:
    """The sending end; inherited by the supervisor and workers through fork."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def send(self, event: Event) -> None:
        payload = pickle.dumps(event, protocol=pickle.HIGHEST_PROTOCOL)
        if _HEADER.size + len(payload) > MAX_FRAME:
            for piece in fit(event, _frame_size, MAX_FRAME):
                self.send(piece)
            return
        os.write(self.fd, _HEADER.pack(len(payload)) + payload)

    def close(self) -> None:
        os.close(self.fd)


class EventReader:
    """The kernel's end: non-blocking reads, buffered until frames are whole."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()
        self.at_eof = False

    def read(self, timeout: float) -> list[Event]:
        """Events that arrived within `timeout` seconds (maybe none)."""
        if self.at_eof:
            return []
        ready, _, _ = select.select([self.fd], [], [], timeout)
        # Bounded, so a flood of events cannot starve the caller's other work.
        for _ in range(_MAX_READS_PER_CALL):
            if not ready:
                break
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.at_eof = True
                break
            self._buffer += chunk
            ready, _, _ = select.select([self.fd], [], [], 0)
        return self._take_frames()

    def _take_frames(self) -> list[Event]:
        events: list[Event] = []
        while len(self._buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buffer)
            end = _HEADER.size + size
            if len(self._buffer) < end:
                break
            events.append(pickle.loads(self._buffer[_HEADER.size : end]))
            del self._buffer[:end]
        return events

    def close(self) -> None:
        os.close(self.fd)


def _frame_size(event: Event) -> int:
    return _HEADER.size + len(pickle.dumps(event, protocol=pickle.HIGHEST_PROTOCOL))


def open_channel() -> tuple[EventReader, EventWriter]:
    read_fd, write_fd = os.pipe()
    return EventReader(read_fd), EventWriter(write_fd)
