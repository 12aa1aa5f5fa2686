"""Worker processes' stack dumps: armed in each worker, asked for and read by the kernel (or a pod host's `train.py`).

Each worker arms `faulthandler` on `STACKS_SIGNAL` with its dump file in
the exchange directory, and records beside it when it started. Whoever asks
empties the process's dump file, signals it (through
`tpu_nb.basics.signals`: only the process that armed, never a newer one
that got its pid after it exited: SIGUSR2 would end that one) and reads the
file once it stops growing. The format is faulthandler's
(CPython 3.10-3.14):

    Thread 0x00007faac916f6c0 (most recent call first):
      File "/tmp/fh.py", line 4 in inner
      ...

    Current thread 0x00007faac9fbfb80 (most recent call first):
      File "/tmp/fh.py", line 7 in <module>
"""

from __future__ import annotations

import faulthandler
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tpu_nb.basics.signals import Delivery, Target, send_signal
from tpu_nb.wire.stacks import STACKS_SIGNAL, stack_dump_path
from tpu_nb.workers.doctor.analysis_log import Frame
from tpu_nb.workers.doctor.places import TPU_NB_DIR, TPU_NB_MARK

ANSWER_SECONDS = 3.0
"""How long a process may take to write its stacks (a process in uninterruptible sleep never does)."""
_SETTLED_SECONDS = 0.15
_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)(?: \[.*\])? \(most recent call first\):$")
_FRAME = re.compile(r'^\s+File "(?P<filename>.*)", line (?P<line>\d+) in (?P<function>.*)$')
_DUMP_FILE = re.compile(r"^stacks-(\d+)\.txt$")

_dump_file: IO[str] | None = None  # kept open for the interpreter's signal handler, for the process's life


def arm_stack_dumps(exchange_dir: Path, pid: int) -> None:
    """On `STACKS_SIGNAL`, write every thread's Python stack to this process's dump file (once per process).

    faulthandler writes from its C signal handler, so a rank stuck in C++
    answers too. Append mode: the asker empties the file before each
    request, and the next dump must start at its beginning, not at the old
    offset.
    """
    global _dump_file
    if _dump_file is not None:
        return
    _dump_file = open(stack_dump_path(exchange_dir, pid), "a", encoding="utf-8")
    faulthandler.register(STACKS_SIGNAL, file=_dump_file, all_threads=True)
    _start_path(exchange_dir, pid).write_text(repr(Target.seen(pid).started_at))


def armed_target(exchange_dir: Path, pid: int) -> Target | None:
    """Process `pid` as it was when it armed its dumps in `exchange_dir` (its start time), or None if it never did."""
    try:
        recorded = _start_path(exchange_dir, pid).read_text()
    except OSError:
        return None
    return Target(pid, None if recorded == "None" else float(recorded))


def _start_path(exchange_dir: Path, pid: int) -> Path:
    return stack_dump_path(exchange_dir, pid).with_suffix(".started")


def armed_processes(exchange_dir: Path) -> list[int]:
    """The processes that armed their dumps in `exchange_dir` (a pod host's workers, found by their files)."""
    return sorted(int(match[1]) for path in exchange_dir.glob("stacks-*.txt") if (match := _DUMP_FILE.match(path.name)))


@dataclass(frozen=True, slots=True)
class ThreadStack:
    """One thread's Python frames, outermost first."""

    thread: int
    frames: tuple[Frame, ...]


@dataclass(frozen=True, slots=True)
class ProcessStacks:
    """What one process answered: its threads, or why it did not."""

    pid: int
    threads: tuple[ThreadStack, ...]
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class Dump:
    """What one process wrote when asked (faulthandler's text), or why it wrote nothing."""

    pid: int
    text: str
    problem: str | None = None


def request_stacks(exchange_dir: Path, pids: Iterable[int]) -> list[ProcessStacks]:
    """Every process's threads (signalled at once, at most `ANSWER_SECONDS` in all), or why it gave none."""
    return [stacks_of(dump) for dump in request_dumps(exchange_dir, pids)]


def stacks_of(dump: Dump) -> ProcessStacks:
    """A dump's threads (a pod host sends its workers' dumps as text)."""
    return ProcessStacks(dump.pid, parse_dump(dump.text), dump.problem)


def request_dumps(exchange_dir: Path, pids: Iterable[int]) -> list[Dump]:
    """Signal every process at once, then read each one's dump (at most `ANSWER_SECONDS` in all).

    Only the processes that armed their dumps, as they were then: a pid that
    now names another process (the worker exited) is not signalled.
    """
    asked = []
    for pid in pids:
        target = armed_target(exchange_dir, pid)
        if target is None:
            asked.append(Dump(pid, "", "it has not armed its stack dumps (it has not started, or it is not a worker)"))
            continue
        stack_dump_path(exchange_dir, pid).write_bytes(b"")
        delivery = send_signal(target, STACKS_SIGNAL)
        if delivery is Delivery.GONE:
            asked.append(Dump(pid, "", "the process has exited"))
        elif delivery is not Delivery.SENT:
            asked.append(Dump(pid, "", f"it could not be asked ({delivery.value})"))
        else:
            asked.append(Dump(pid, ""))
    deadline = time.monotonic() + ANSWER_SECONDS
    return [_read_answer(dump.pid, exchange_dir, deadline) if dump.problem is None else dump for dump in asked]


def _read_answer(pid: int, exchange_dir: Path, deadline: float) -> Dump:
    path = stack_dump_path(exchange_dir, pid)
    size, settled_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        current = path.stat().st_size if path.exists() else 0
        if current != size:
            size, settled_since = current, time.monotonic()
        elif size > 0 and time.monotonic() - settled_since >= _SETTLED_SECONDS:
            break
        time.sleep(0.02)
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    if not parse_dump(text):
        return Dump(pid, "", f"no answer within {ANSWER_SECONDS:g}s (stuck in the kernel of the OS, or ended)")
    return Dump(pid, text)


def portable(text: str) -> str:
    """A dump whose file names in tpu_nb say so on any machine (a pod host's copy of tpu_nb lives elsewhere than the notebook's)."""
    return text.replace(f'File "{TPU_NB_DIR}/', f'File "{TPU_NB_MARK}/')


def parse_dump(text: str) -> tuple[ThreadStack, ...]:
    """The threads of one faulthandler dump; frames outermost first (faulthandler lists them innermost first)."""
    threads: list[ThreadStack] = []
    thread: int | None = None
    frames: list[Frame] = []
    for line in text.splitlines():
        header = _THREAD.match(line)
        if header:
            if thread is not None:
                threads.append(ThreadStack(thread, tuple(reversed(frames))))
            thread, frames = int(header[1], 16), []
            continue
        frame = _FRAME.match(line)
        if frame and thread is not None:
            frames.append(Frame(frame["function"], frame["filename"], int(frame["line"])))
    if thread is not None:
        threads.append(ThreadStack(thread, tuple(reversed(frames))))
    return tuple(threads)
