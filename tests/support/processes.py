"""Helpers for tests that watch processes."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

# How long a test waits for a run to start (workers forked, torch_xla imported, the first steps compiled) before it
# calls the run hung. A hang guard, never an expected duration: in CI on a contended 2-core machine a pod run's two
# simulated hosts took more than 60 s to report their third step, so a guard that short failed a healthy run.
STARTUP = 600.0


def descendants(pid: int) -> list[int]:
    """Live (non-zombie) processes below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    states = {}
    for stat in os.listdir("/proc"):
        if not stat.isdigit():
            continue
        try:
            with open(f"/proc/{stat}/stat") as handle:
                text = handle.read()
        except OSError:
            continue
        state, ppid = text[text.rindex(")") + 2 :].split(" ", 2)[:2]
        children.setdefault(int(ppid), []).append(int(stat))
        states[int(stat)] = state
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if states.get(child) != "Z":
                found.append(child)
            todo.append(child)
    return found


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def interrupt_when(ready: Callable[[], bool], delays: tuple[float, ...]) -> None:
    """SIGINT this process (as Jupyter does) once `ready()`, then after each delay."""
    main_pid = os.getpid()

    def send() -> None:
        if wait_until(ready, timeout=STARTUP):
            for delay in delays:
                time.sleep(delay)
                os.kill(main_pid, signal.SIGINT)

    threading.Thread(target=send, daemon=True).start()
