"""What a worker prints goes to the kernel as `Output` events (a forked process cannot write to the cell)."""

from __future__ import annotations

import io
import sys
import threading

from tpu_nb.wire.channel import EventSink
from tpu_nb.wire.events import Output
from tpu_nb.wire.limits import utf8_pieces

OUTPUT_CHUNK_BYTES = 2048  # of UTF-8: an event of this much text fits one atomic write, in any script

thread_rank = threading.local()
"""The rank of the device thread printing (TPU v2/v3 run two ranks per process)."""


class _ChannelStream(io.TextIOBase):
    """sys.stdout / sys.stderr in a worker: text goes to the kernel as events."""

    def __init__(self, writer: EventSink, stream: str, fd: int) -> None:
        self._writer = writer
        self._stream = stream
        self._fd = fd
        self._pending: list[str] = []
        self._lock = threading.Lock()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        # C-level writers (faulthandler, subprocesses) keep the real descriptor.
        return self._fd

    def write(self, text: str) -> int:
        with self._lock:
            self._pending.append(text)
        if "\n" in text or "\r" in text or sum(map(len, self._pending)) > 4096:
            self.flush()
        return len(text)

    def flush(self) -> None:
        with self._lock:
            text, self._pending = "".join(self._pending), []
        rank = getattr(thread_rank, "value", None)
        for piece in utf8_pieces(text, OUTPUT_CHUNK_BYTES):
            self._writer.send(Output(rank, self._stream, piece))


def capture_output(writer: EventSink) -> None:
    """Send this process's Python-level output to the kernel (once per process)."""
    if isinstance(sys.stdout, _ChannelStream):
        return
    sys.stdout = _ChannelStream(writer, "stdout", 1)
    sys.stderr = _ChannelStream(writer, "stderr", 2)


def flush_output() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
