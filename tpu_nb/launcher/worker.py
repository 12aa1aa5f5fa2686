"""The code that runs in each forked worker, around the user's program.

The supervisor sets `PAYLOAD` before `xmp.spawn` forks the workers, so the
payload reaches them through fork, never through pickling.
"""

from __future__ import annotations

import io
import os
import pickle
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from tpu_nb.events import Output, WorkerFailed, WorkerFinished, WorkerStarted
from tpu_nb.launcher.channel import EventWriter
from tpu_nb.launcher.control import StopControl
from tpu_nb.launcher.program import Program, WorkerContext
from tpu_nb.progress import reporter as reporting
from tpu_nb.progress.reporter import WorkerReporter
from tpu_nb.progress.trainer import watch_for_trainer

_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)
_OUTPUT_CHUNK = 700  # characters: 4 bytes each at most, so an event fits one atomic write


@dataclass(frozen=True, slots=True)
class WorkerPayload:
    program: Program
    writer: EventWriter
    control: StopControl
    run_dir: Path
    all_results: bool


@dataclass(frozen=True, slots=True)
class WorkerFailure:
    """What the kernel needs to show a worker's exception; pickled to the run dir."""

    rank: int
    world_size: int
    type_name: str
    message: str
    traceback_lines: list[str]


PAYLOAD: WorkerPayload | None = None
_thread_rank = threading.local()
_setup_lock = threading.Lock()


def run_worker(index: int) -> None:
    """`xmp.spawn`'s function: `index` is the global ordinal."""
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    payload = PAYLOAD
    assert payload is not None, "run_worker runs only in workers forked by tpu_nb's supervisor"
    rank, world_size = index, xr.world_size()
    _thread_rank.value = rank
    capture_output(payload.writer)
    reporter = _reporter_for(payload)
    reporter.enter(rank, world_size)
    context = WorkerContext(rank, world_size, torch_xla.device(), len(xm.get_xla_supported_devices()))
    payload.writer.send(WorkerStarted(rank, world_size, os.getpid(), str(context.device)))
    try:
        parts = payload.program.run(context)
    except BaseException as error:  # noqa: BLE001 - everything the user's code raises goes to the kernel
        failure = WorkerFailure(rank, world_size, type(error).__name__, str(error), format_user_traceback(error))
        (payload.run_dir / f"error-{rank}.pkl").write_bytes(pickle.dumps(failure))
        _flush_output()
        payload.writer.send(WorkerFailed(rank, f"{failure.type_name}: {failure.message}"[:500]))
        return
    reporter.flush()
    if rank == 0 or payload.all_results:
        from tpu_nb.launcher.transfer import save_parts

        save_parts(parts, payload.run_dir, rank)
    _flush_output()
    payload.writer.send(WorkerFinished(rank))


def _reporter_for(payload: WorkerPayload) -> WorkerReporter:
    """This process's progress reporter, created (with the Trainer hook) by its first device thread."""
    with _setup_lock:
        reporter = reporting.current()
        if reporter is None:
            reporter = WorkerReporter(payload.writer, payload.control)
            reporting.install(reporter)
            watch_for_trainer()
        return reporter


def format_user_traceback(error: BaseException) -> list[str]:
    """The traceback from the user's first frame on, as IPython would show it."""
    tb = _skip_own_frames(error.__traceback__)
    shell = _ipython_shell()
    if shell is not None:
        # tb_offset=0: the shell's formatter skips its first frame by default
        # (IPython's own run_code frame) on IPython 7.x, which here would be the
        # cell's only frame; IPython 8+ no longer applies that default.
        return list(shell.InteractiveTB.structured_traceback(type(error), error, tb, tb_offset=0))
    return "".join(traceback.format_exception(type(error), error, tb)).rstrip("\n").split("\n")


def _skip_own_frames(tb: TracebackType | None) -> TracebackType | None:
    first = tb
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        tb = tb.tb_next
    return tb or first


def _ipython_shell() -> Any:
    import sys

    if "IPython" not in sys.modules:
        return None
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance() if InteractiveShell.initialized() else None


class _ChannelStream(io.TextIOBase):
    """sys.stdout / sys.stderr in a worker: text goes to the kernel as events."""

    def __init__(self, writer: EventWriter, stream: str, fd: int) -> None:
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
        rank = getattr(_thread_rank, "value", None)
        for start in range(0, len(text), _OUTPUT_CHUNK):
            self._writer.send(Output(rank, self._stream, text[start : start + _OUTPUT_CHUNK]))


def capture_output(writer: EventWriter) -> None:
    """Send this process's Python-level output to the kernel (once per process)."""
    import sys

    if isinstance(sys.stdout, _ChannelStream):
        return
    sys.stdout = _ChannelStream(writer, "stdout", 1)
    sys.stderr = _ChannelStream(writer, "stderr", 2)


def _flush_output() -> None:
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
