"""Asking worker processes for their threads' stacks, and reading what `faulthandler` wrote.

A worker armed `faulthandler` on `STACKS_SIGNAL` (`tpu_nb.workers.watchdog`).
The kernel empties the process's dump file, signals it and reads the file
once it stops growing. The format is faulthandler's (CPython 3.10-3.14):

    Thread 0x00007faac916f6c0 (most recent call first):
      File "/tmp/fh.py", line 4 in inner
      ...

    Current thread 0x00007faac9fbfb80 (most recent call first):
      File "/tmp/fh.py", line 7 in <module>
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tpu_nb.wire.stacks import STACKS_SIGNAL, stack_dump_path
from tpu_nb.workers.doctor.analysis_log import Frame

ANSWER_SECONDS = 3.0
"""How long a process may take to write its stacks (a process in uninterruptible sleep never does)."""
_SETTLED_SECONDS = 0.15
_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)(?: \[.*\])? \(most recent call first\):$")
_FRAME = re.compile(r'^\s+File "(?P<filename>.*)", line (?P<line>\d+) in (?P<function>.*)$')


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


def request_stacks(run_dir: Path, pids: Iterable[int]) -> list[ProcessStacks]:
    """Signal every process at once, then read each one's dump (at most `ANSWER_SECONDS` in all)."""
    asked = []
    for pid in pids:
        path = stack_dump_path(run_dir, pid)
        try:
            path.write_bytes(b"")
            os.kill(pid, STACKS_SIGNAL)
        except ProcessLookupError:
            asked.append(ProcessStacks(pid, (), "the process has exited"))
            continue
        except OSError as error:
            asked.append(ProcessStacks(pid, (), f"it could not be asked ({error.strerror or error})"))
            continue
        asked.append(ProcessStacks(pid, ()))
    deadline = time.monotonic() + ANSWER_SECONDS
    return [_read_answer(stacks, run_dir, deadline) if stacks.problem is None else stacks for stacks in asked]


def _read_answer(asked: ProcessStacks, run_dir: Path, deadline: float) -> ProcessStacks:
    path = stack_dump_path(run_dir, asked.pid)
    size, settled_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        current = path.stat().st_size if path.exists() else 0
        if current != size:
            size, settled_since = current, time.monotonic()
        elif size > 0 and time.monotonic() - settled_since >= _SETTLED_SECONDS:
            break
        time.sleep(0.02)
    threads = parse_dump(path.read_text(encoding="utf-8", errors="replace") if path.exists() else "")
    if not threads:
        return ProcessStacks(asked.pid, (), f"no answer within {ANSWER_SECONDS:g}s (stuck in the kernel of the OS, or ended)")
    return ProcessStacks(asked.pid, threads)


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
