"""The kernel's side of one launch: start the supervisor, pump events, stop, collect.

Only one run is alive per kernel: TPU devices cannot be shared between two
sets of workers.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Protocol

from tpu_nb.events import Event, Stopping, WorkerFailed, WorkerStarted
from tpu_nb.launcher import outcome as outcomes
from tpu_nb.launcher.channel import EventReader, open_channel
from tpu_nb.launcher.control import StopControl
from tpu_nb.launcher.environment import WorkerEnvironment
from tpu_nb.launcher.program import Program
from tpu_nb.launcher import forking
from tpu_nb.launcher.supervisor import prepare_to_fork, supervise
from tpu_nb.launcher.worker import WorkerPayload

TERMINATE_GRACE = 2.0  # seconds between SIGTERM and SIGKILL
KILL_WAIT = 10.0  # seconds for SIGKILLed processes to disappear
_SUPERVISOR_CRASHED = 70


class RunObserver(Protocol):
    """Gets every event of a run, in the kernel, in order."""

    def on_event(self, event: Event) -> None: ...


class Run:
    """One set of workers started from this kernel."""

    def __init__(self, program: Program, environment: WorkerEnvironment, observers: list[RunObserver], all_results: bool) -> None:
        self.program = program
        self.environment = environment
        self.observers = observers
        self.all_results = all_results
        self.started_at = time.monotonic()
        self.ranks_by_pid: dict[int, int] = {}
        self.world_size: int | None = None
        self.first_failed_rank: int | None = None
        self.stop_reason: str | None = None
        self.last_step: int | None = None
        self.survivors: list[int] = []
        self.control = StopControl(environment.devices)
        self.stopping_step: int | None = None  # set when rank 0 reached a graceful stop
        self._supervisor_status: int | None = None
        self._reader: EventReader | None = None
        self._run_dir: Path | None = None
        self.pid = 0

    def start(self) -> None:
        """Fork the supervisor; it forks the workers through `xmp.spawn`."""
        # Anything buffered now would be printed again by each forked copy.
        sys.stdout.flush()
        sys.stderr.flush()
        reader, writer = open_channel()
        run_dir = Path(tempfile.mkdtemp(prefix="tpu_nb-", dir=_shared_memory_dir()))
        payload = WorkerPayload(self.program, writer, self.control, run_dir, self.all_results)
        kernel_pid = os.getpid()
        prepare_to_fork()
        pid = forking.fork()
        if pid == 0:  # the supervisor: never returns into the kernel's code
            code = _SUPERVISOR_CRASHED
            try:
                reader.close()
                code = supervise(payload, self.environment, kernel_pid)
            finally:
                os._exit(code)
        # Also set here, so the group exists before the kernel may signal it.
        try:
            os.setpgid(pid, pid)
        except (PermissionError, ProcessLookupError):
            pass  # the child did it first, or already exited
        writer.close()
        self.pid, self._reader, self._run_dir = pid, reader, run_dir
        self.started_at = time.monotonic()

    @property
    def finished(self) -> bool:
        return self._supervisor_status is not None

    def pump(self, timeout: float) -> None:
        """Deliver events that arrive within `timeout`; notice the end of the run."""
        assert self._reader is not None
        for event in self._reader.read(timeout):
            self._deliver(event)
        if self._supervisor_status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._supervisor_status = os.waitstatus_to_exitcode(status)
                self._drain()
                if live_group_members(self.pid):
                    # Processes a worker started and left behind: end them too.
                    self._kill_group()
        if self.first_failed_rank is not None and not self.finished:
            # One rank failed: the others may wait on it forever in a collective.
            self.terminate("failure")

    def _deliver(self, event: Event) -> None:
        if isinstance(event, WorkerStarted):
            self.ranks_by_pid[event.pid] = event.rank
            self.world_size = event.world_size
        elif isinstance(event, WorkerFailed) and self.first_failed_rank is None:
            self.first_failed_rank = event.rank
        elif isinstance(event, Stopping) and event.rank == 0:
            self.stopping_step = event.step
        step = getattr(event, "step", None)
        if step is not None and getattr(event, "rank", None) == 0:
            self.last_step = step
        for observer in self.observers:
            observer.on_event(event)

    def _drain(self) -> None:
        assert self._reader is not None
        while events := self._reader.read(0):
            for event in events:
                self._deliver(event)

    def request_stop(self) -> None:
        """Graceful stop: every worker ends at the next step boundary they agree on."""
        self.control.request()

    def terminate(self, reason: str) -> None:
        """Hard stop: SIGTERM the whole process group, then SIGKILL what is left."""
        if self.stop_reason is None and reason != "failure":
            self.stop_reason = reason
        if not self.finished:
            self._kill_group()

    def _kill_group(self) -> None:
        for signum, wait in ((signal.SIGTERM, TERMINATE_GRACE), (signal.SIGKILL, KILL_WAIT)):
            _signal_group(self.pid, signum)
            deadline = time.monotonic() + wait
            while not self._group_gone() and time.monotonic() < deadline:
                time.sleep(0.02)
            if self._group_gone():
                break
        else:
            # Stuck in the kernel (uninterruptible I/O on a device): say so.
            self.survivors = live_group_members(self.pid)
        self._drain()

    def _group_gone(self) -> bool:
        if self._supervisor_status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._supervisor_status = os.waitstatus_to_exitcode(status)
        return not live_group_members(self.pid)

    def outcome(self) -> outcomes.Outcome:
        """How the run ended; call once `finished`. Removes the run dir."""
        assert self._run_dir is not None and self._supervisor_status is not None
        seconds = time.monotonic() - self.started_at
        try:
            if self.stop_reason is not None:
                return outcomes.Stopped(self.stop_reason, seconds, self.last_step)
            ranks = list(range(self.world_size or 1)) if self.all_results else [0]
            return outcomes.collect(
                self._run_dir, self.ranks_by_pid, self.first_failed_rank, self._supervisor_status, ranks, seconds, self.stopping_step
            )
        finally:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            if self._reader is not None:
                self._reader.close()
                self._reader = None


def live_group_members(pgid: int) -> list[int]:
    """Pids in process group `pgid` that have not exited.

    Not `killpg(pgid, 0)`: that also finds exited workers that an init
    process which does not reap (common in containers) leaves as zombies.
    """
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited meanwhile
        # Fields after the command name, which is in parentheses and may hold spaces.
        state, _ppid, pgrp = text[text.rindex(")") + 2 :].split(" ", 3)[:3]
        if int(pgrp) == pgid and state not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def _shared_memory_dir() -> str | None:
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
