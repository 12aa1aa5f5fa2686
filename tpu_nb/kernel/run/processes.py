"""The processes of one run, seen from the kernel: fork the supervisor, read its events, end the group.

Mechanics only: `runs.Run` decides when to stop and what the events mean.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from collections.abc import Collection
from pathlib import Path

from tpu_nb.basics.signals import Target, live_group_members, send_group_signal, send_signal
from tpu_nb.kernel.run import forking, warm_imports
from tpu_nb.kernel.run.leftovers import private_directory
from tpu_nb.wire.channel import EventReader, open_channel
from tpu_nb.wire.checkpoints import CheckpointPlan
from tpu_nb.wire.environment import WorkerEnvironment
from tpu_nb.wire.events import Event
from tpu_nb.wire.mesh import MeshShape
from tpu_nb.wire.results import ResultPlaces, free_bytes, remove_places
from tpu_nb.wire.shared_memory_stop import StopRequest
from tpu_nb.wire.stacks import WatchdogSetting
from tpu_nb.workers.processes.chip_ranks import ChipRun
from tpu_nb.workers.processes.programs import Program
from tpu_nb.workers.processes.supervisor import prepare_to_fork, supervise
from tpu_nb.workers.processes.worker import WorkerPayload

TERMINATE_GRACE = 2.0  # seconds between SIGTERM and SIGKILL
KILL_WAIT = 10.0  # seconds for SIGKILLed processes to disappear
_SUPERVISOR_CRASHED = 70
MIN_SHARED_MEMORY = 16 << 20  # bytes /dev/shm must have free to hold a run's small files (bigger results spill to disk)


class WorkerProcesses:
    """The supervisor (leading its own process group) and everything in that group."""

    def __init__(self) -> None:
        self.pid = 0
        self.places: ResultPlaces | None = None
        self.keep: Path | None = None
        """A result file the kernel could not load: its place is not removed."""
        self._reader: EventReader | None = None
        self._exit_status: int | None = None

    def start(
        self,
        program: Program,
        environment: WorkerEnvironment,
        stop_request: StopRequest,
        all_results: bool,
        mesh: MeshShape | None,
        doctor: bool = True,
        compile_cache: str | None = None,
        checkpoints: CheckpointPlan | None = None,
        watchdog: WatchdogSetting | None = None,
        chips: ChipRun | None = None,
    ) -> None:
        """Fork the supervisor; it forks the workers (through `xmp.spawn`, one SPMD worker when `mesh` is given, or a TorchTPU
        process per chip when `chips` is)."""
        warm_imports.wait()  # no import half done in another thread when the kernel forks
        # Anything buffered now would be printed again by each forked copy.
        sys.stdout.flush()
        sys.stderr.flush()
        reader, writer = open_channel()
        places = make_places()
        payload = WorkerPayload(
            program, writer, stop_request, places, all_results, mesh, doctor, compile_cache, checkpoints, watchdog, chips
        )
        kernel_pid = os.getpid()
        prepare_to_fork()
        pid = forking.fork()
        if pid == 0:  # the supervisor: never returns into the kernel's code
            code = _SUPERVISOR_CRASHED
            try:
                reader.close()
                code = supervise(payload, environment, kernel_pid)
            finally:
                os._exit(code)
        # Also set here, so the group exists before the kernel may signal it.
        try:
            os.setpgid(pid, pid)
        except (PermissionError, ProcessLookupError):
            pass  # the child did it first, or already exited
        writer.close()
        self.pid, self._reader, self.places = pid, reader, places

    def read(self, timeout: float) -> list[Event]:
        """Events that arrive within `timeout` seconds."""
        assert self._reader is not None
        return self._reader.read(timeout)

    def read_rest(self) -> list[Event]:
        """Every event still in the pipe (after the supervisor exited)."""
        assert self._reader is not None
        events: list[Event] = []
        while batch := self._reader.read(0):
            events += batch
        return events

    @property
    def exit_status(self) -> int | None:
        """The supervisor's exit code once it exited (negative: the signal), else None."""
        if self._exit_status is None and self.pid:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._exit_status = os.waitstatus_to_exitcode(status)
        return self._exit_status

    @property
    def group_alive(self) -> bool:
        return bool(live_group_members(self.pid))

    def end(self, workers: Collection[int] = ()) -> list[int]:
        """End the run's processes; the pids among `workers` that needed SIGKILL.

        The workers get SIGTERM first, on their own: the supervisor's end
        would SIGKILL them at once (their parent-death signal) and hide
        which one did not end by itself. Then the whole group, SIGTERM and
        SIGKILL, and wait until it is gone.
        """
        killed = []
        if workers:
            _signal_each(workers, signal.SIGTERM, self.pid)
            deadline = time.monotonic() + TERMINATE_GRACE
            while (alive := set(workers) & set(live_group_members(self.pid))) and time.monotonic() < deadline:
                time.sleep(0.02)
            killed = sorted(alive)
            _signal_each(killed, signal.SIGKILL, self.pid)
        for signum, wait in ((signal.SIGTERM, TERMINATE_GRACE), (signal.SIGKILL, KILL_WAIT)):
            send_group_signal(self.pid, signum)
            deadline = time.monotonic() + wait
            while not self._gone() and time.monotonic() < deadline:
                time.sleep(0.02)
            if self._gone():
                break
        return killed

    def close(self) -> None:
        """Remove the run's directories and close the pipe."""
        if self.places is not None:
            remove_places(self.places, self.keep)
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _gone(self) -> bool:
        return self.exit_status is not None and not self.group_alive


def _signal_each(pids: Collection[int], signum: int, group: int) -> None:
    """Signal each of `pids` that is still a member of the run's process group (never a process that took an exited one's pid)."""
    for pid in pids:
        send_signal(Target.seen(pid), signum, still_target=lambda pid=pid: pid in live_group_members(group))  # type: ignore[misc]


def make_places() -> ResultPlaces:
    """A private exchange directory in shared memory (/dev/shm, when it has room), and one on local disk for results that do not fit.

    Both are created empty now (0700, random names, see `leftovers`), so no
    other user can claim them before a worker writes there.
    """
    shm = Path("/dev/shm")
    disk = Path(tempfile.gettempdir())
    in_memory = shm.is_dir() and os.access(shm, os.W_OK) and free_bytes(shm) >= MIN_SHARED_MEMORY
    exchange_dir = private_directory("", shm if in_memory else disk)
    if not in_memory or disk.stat().st_dev == shm.stat().st_dev:
        return ResultPlaces(exchange_dir)  # the exchange directory is on that disk already
    return ResultPlaces(exchange_dir, (private_directory("results", disk),))
