"""A run on a pod slice, followed from the notebook: the hosts' JSON lines feed the same dashboard as a local run.

The backend (gcloud or kubectl) starts `train.py` on every host and gives
back one local process whose output is every host's output. Each host's
events become the dashboard's worker row for that host; rank 0's progress
(on host 0) drives the charts. A failure on any host ends the run on every
host (the others would wait for it forever in a collective), and so do a
Kill, a second interrupt and the timeout. A graceful stop delivers, to every
host, the step to stop at (`pod_stop`). When a rank stalls, a host goes
silent or the user asks, every host is asked for its workers' stacks
(`tpu_nb.kernel.stalls.pod_stacks`).
"""

from __future__ import annotations

import dataclasses
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import IO

from tpu_nb.kernel.endings.notebook_errors import RunEnded, refused
from tpu_nb.kernel.endings.run_ending import Died, Ending, Outcome, Raised, Stopped, Succeeded, ending_of
from tpu_nb.kernel.notebook.cell_output import LinePrefixer, OutputPrinter, Write, write_to_sys
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.pod.backends import commands
from tpu_nb.kernel.pod.backends.protocol import PodBackend
from tpu_nb.kernel.pod.backends.slices import TpuSlice
from tpu_nb.kernel.pod.pod_stop import STOP_AHEAD_SECONDS, stop_step
from tpu_nb.kernel.pod.reaper import Reaper
from tpu_nb.kernel.progress.display import make_display
from tpu_nb.kernel.progress.throughput import Basis, generation_basis
from tpu_nb.kernel.run.followed_run import POLL_SECONDS, FollowedRun, RunObserver
from tpu_nb.kernel.stalls.pod_stacks import PodStacks
from tpu_nb.wire.events import Heartbeat, Output, Progress, Stalled, Stopping, WorkerStarted
from tpu_nb.wire.host_lines import MAX_LINE_BYTES, HostEnded, decode
from tpu_nb.wire.limits import cap_text
from tpu_nb.wire.results import ResultNotLoaded, load_result
from tpu_nb.wire.run_directory import STACKS_REQUEST_FILE, STOP_FILE, RunDirectory, stop_text
from tpu_nb.wire.stacks import StackAnswer, StackReport
from tpu_nb.wire.stop_reason import StopReason
from tpu_nb.wire.worker_exceptions import ExceptionReport

STREAM_END_WAIT = 10.0  # seconds for the backend's stream to end after every host said it ended
OTHER_LINES_KEPT = 3  # of the lines that are no host's event (gcloud's, kubectl's, C++ logs), for an error that needs them
OTHER_LINE_BYTES = 2000  # of each of them kept (head and tail)


class _Lines:
    """The lines of a started command's stdout and stderr, read by two threads.

    The hosts may print anything: bytes are decoded with replacement, a line
    longer than `MAX_LINE_BYTES` comes in pieces, and a reader never stops
    before its stream ends (a host blocked on a full pipe would never end).
    """

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._queue: queue.Queue[tuple[str, str]] = queue.Queue()
        self._readers = [
            threading.Thread(target=self._read, args=(pipe, name), daemon=True, name=f"tpu_nb-pod-{name}")
            for pipe, name in ((process.stdout, "stdout"), (process.stderr, "stderr"))
            if pipe is not None
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, pipe: IO[bytes], stream: str) -> None:
        try:
            while chunk := pipe.readline(MAX_LINE_BYTES):
                self._queue.put((stream, chunk.decode(errors="replace")))
        except (OSError, ValueError):
            pass  # the pipe was closed under us: the run is being ended

    def take(self, timeout: float) -> list[tuple[str, str]]:
        """(stream, line) pairs that arrive within `timeout` seconds."""
        try:
            taken = [self._queue.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                taken.append(self._queue.get_nowait())
            except queue.Empty:
                return taken

    @property
    def finished(self) -> bool:
        return not any(reader.is_alive() for reader in self._readers) and self._queue.empty()


class PodRun(FollowedRun):
    """One run on a pod slice, from its start to its ending; the same life as a run on this machine."""

    def __init__(
        self,
        backend: PodBackend,
        run: RunDirectory,
        options: LaunchOptions,
        title: str,
        write: Write = write_to_sys,
        observers: Sequence[RunObserver] = (),
        runtime_label: str | None = None,
        staging: Path | None = None,
        tpu: TpuSlice | None = None,
    ) -> None:
        super().__init__(options, title, [OutputPrinter(all_ranks=False, write=write), *observers], write)
        self._speed.basis = (
            Basis(1, None, "no MFU: the pod's slice is not known here", options.flops_per_token)
            if tpu is None
            else generation_basis(tpu.generation, tpu.chips, options.flops_per_token)
        )
        self.backend = backend
        self.runtime_label = runtime_label or backend.label
        self.run = run
        self.staging = staging
        """A temporary local copy of a gs:// run, removed when the run is over."""
        self._process: subprocess.Popen[bytes] | None = None
        self._reaper: Reaper | None = None
        self._lines: _Lines | None = None
        self._hosts_started: set[int] = set()
        self._ended_hosts: dict[int, HostEnded] = {}
        self._raised: tuple[int, ExceptionReport] | None = None
        self._host_prefixers: dict[int, LinePrefixer] = {}  # --all-ranks-output: every host's lines begin with its number
        self._steps: deque[tuple[float, int]] = deque(maxlen=20)  # host 0's (time, step): the rate
        self._furthest: dict[int, tuple[float, int]] = {}  # host -> (time, step) of its furthest step heard
        self._stacks = PodStacks(options.watchdog, self._ask_for_stacks, run.cells)
        self._follower: int | None = None  # the thread that follows the run
        self._other_lines: deque[str] = deque(maxlen=OTHER_LINES_KEPT)
        self._origins: dict[str, int] = {}  # a host's train.py ("hostname:pid") -> its row
        self._stopping_step: int | None = None
        self._stopping_reason: StopReason | None = None  # the reason host 0 said its workers obeyed
        self._stream_ended_at: float | None = None

    def stacks(self) -> StackReport:
        """Every host's ranks: asked of every host, waited for (up to `pod_stacks.ASK_SECONDS`)."""
        if self.ended:
            raise RunEnded("the run has ended: it has no stacks any more.")
        request = self._stacks.ask("asked for")
        if threading.get_ident() == self._follower:  # nobody else takes the hosts' lines: take them here
            while not self._stacks.ready(request) and not self.ended:
                self._take_events(POLL_SECONDS)
        else:
            while not self._stacks.ready(request) and not self.ended:
                request.reported.wait(POLL_SECONDS)
        return self._stacks.report(request)

    @property
    def stopping_note(self) -> str:
        return f"every host stops at the same step, a few seconds ahead; {super().stopping_note}"

    def _start(self) -> None:
        """Show the dashboard, copy the run to the hosts and start it there."""
        self._follower = threading.get_ident()
        self._deadline = self.options.deadline
        if self.options.progress:
            self._display = make_display(self.title, self.runtime_label, self.run.hosts, worker_noun="host", basis=self._speed.basis)
            self._observers.append(self._display)
        # First: if the kernel dies from here on, the reaper ends the run everywhere.
        self._reaper = Reaper.start(self.backend.end_commands(self.run.name), remove=[str(self.staging)] if self.staging else [])
        self._process = self.backend.start(self.run)
        self._reaper.watch_group(self._process.pid)
        self._lines = _Lines(self._process)

    def _take_events(self, timeout: float) -> None:
        assert self._lines is not None
        for stream, line in self._lines.take(timeout):
            self._on_line(stream, line)
        self._stacks.on_silence()
        for report in self._stacks.due():
            self._deliver(report)

    def _ended_by_itself(self) -> bool:
        assert self._lines is not None and self._process is not None
        if len(self._ended_hosts) < self.run.hosts and not self._lines.finished:
            return False
        now = time.monotonic()
        self._stream_ended_at = self._stream_ended_at or now
        if self._process.poll() is None and now - self._stream_ended_at <= STREAM_END_WAIT:
            return False  # every host said it ended: give the backend's stream a moment to end too
        commands.end(self._process)
        return True

    def _worker_failed(self) -> bool:
        return any(ended.status != "done" for ended in self._ended_hosts.values())

    def _stop_reached(self) -> bool:
        return self._stopping_step is not None

    @property
    def _stop_ahead(self) -> float:
        return 2 * STOP_AHEAD_SECONDS  # the stop's way to every host, and the steps it is set ahead by

    def _ask_to_stop(self) -> None:
        """Every host stops at the same step, a little ahead, for the stop's reason; delivered by a helper thread (an ssh to
        every host takes time)."""
        text = stop_text(self._stop_step(), self._stopped_by)
        threading.Thread(target=self._send_stop, args=(text,), name="tpu_nb-pod-stop", daemon=True).start()

    def _stop_step(self) -> int | None:
        assert self._started_at is not None
        return stop_step(self._steps, self._furthest.values(), self._started_at, time.monotonic())

    def _ask_for_stacks(self, number: int) -> str | None:
        try:
            self.backend.deliver(self.run, STACKS_REQUEST_FILE, str(number))
        except commands.CommandFailed as error:
            return str(error)
        return None

    def _send_stop(self, text: str) -> None:
        try:
            self.backend.deliver(self.run, STOP_FILE, text)
        except commands.CommandFailed as error:
            self._write("stderr", f"tpu_nb: the stop did not reach every host ({error}); Kill ends the run.\n")

    def _end_everything(self) -> None:
        """End the run on every host, then the local stream."""
        assert self._process is not None and self._lines is not None
        try:
            said = self.backend.end(self.run.name)
        except commands.CommandFailed as error:
            self._write("stderr", f"tpu_nb: could not end the run on every host ({error}); check them yourself.\n")
        else:
            if said:  # a host whose group file outlived it: its processes, if any, were not ended
                self._write("stderr", f"{said}\n  Check that host yourself (%tpu_release there ends what holds its TPU).\n")
        commands.end(self._process)
        self._take_events(0)

    def _release(self) -> None:
        if self._process is not None:
            try:
                self.backend.clean_up(self.run)
            except commands.CommandFailed as error:
                self._write("stderr", f"tpu_nb: could not clean up after the run ({error}).\n")
        if self._reaper is not None:
            self._reaper.release()
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)  # a gs:// run's local copy: its cells may hold tokens

    def _on_line(self, stream: str, line: str) -> None:
        decoded = decode(line)
        if decoded.event is None or decoded.host is None:
            # gcloud's or kubectl's own words, or C++ logs of any host: said when the run fails
            # without an explanation from the hosts, shown live only with --all-ranks-output.
            # A line that only looks like an event is always shown: it is somebody's output.
            self._other_lines.append(cap_text(line.rstrip("\n"), OTHER_LINE_BYTES))
            if self.options.all_ranks_output or decoded.malformed:
                self._deliver(Output(None, stream, line))
            return
        host, event = self._host_of(decoded.origin, decoded.host), decoded.event
        self._stacks.on_event(host, event)
        if isinstance(event, StackAnswer):
            return  # taken by the stacks request it answers
        if isinstance(event, HostEnded):
            self._ended_hosts.setdefault(host, event)
        elif isinstance(event, ExceptionReport):
            if self._raised is None:
                self._raised = (host, event)
        elif isinstance(event, Output):
            if host == 0 and event.rank in (0, None):
                self._deliver(event)
            elif self.options.all_ranks_output:
                prefixer = self._host_prefixers.setdefault(host, LinePrefixer(f"[host {host}] "))
                self._deliver(Output(None, event.stream, prefixer(event.stream, event.text)))
        elif isinstance(event, Progress):
            if host == 0:  # rank 0's: on one machine of a simulation, every host has a rank 0
                if event.step is not None:
                    self._steps.append((time.monotonic(), event.step))
                self._deliver(event)
        elif isinstance(event, WorkerStarted):
            if host not in self._hosts_started:
                self._hosts_started.add(host)
                self._deliver(WorkerStarted(host, self.run.hosts, event.pid, event.device))
        elif not isinstance(event, StackReport):  # a report is made in the kernel: host lines never carry one
            if isinstance(event, Stopping) and host == 0:
                self._stopping_step, self._stopping_reason = event.step, event.reason
            if isinstance(event, Heartbeat) and event.step is not None and event.step >= self._furthest.get(host, (0.0, -1))[1]:
                self._furthest[host] = (time.monotonic(), event.step)
            self._deliver(dataclasses.replace(event, rank=host))  # one worker row per host
            if isinstance(event, Stalled):
                self._stacks.on_stall(host, event)  # its report comes once the hosts answer

    def _host_of(self, origin: str | None, claimed: int) -> int:
        """The host's row: the number it claims (TPU_WORKER_ID, the TPU VM's metadata), unless another host claimed it first.

        Hosts that cannot tell their number (an environment without either) all
        claim 0; their train.py processes still tell them apart.
        """
        if origin is None:
            return claimed if claimed < self.run.hosts else 0
        if origin not in self._origins:
            taken = set(self._origins.values())
            free = claimed not in taken and claimed < self.run.hosts
            self._origins[origin] = claimed if free else min(set(range(len(taken) + 1)) - taken)
        return self._origins[origin]

    def _ending(self) -> Ending:
        seconds = self._seconds
        problems = [str(ended.detail) for _host, ended in sorted(self._ended_hosts.items()) if ended.status == "refused"]
        if problems:
            error = refused(problems, pod=True, by="the hosts")
            return Ending("failed", str(error), error)
        return ending_of(self._outcome(seconds))

    def _outcome(self, seconds: float) -> Outcome:
        if self._raised is not None:
            host, report = self._raised
            return Raised(report, seconds, host)
        if self._hard_stop is not None:
            return Stopped(self._hard_stop, seconds, self._steps[-1][1] if self._steps else None)
        died = [(host, ended) for host, ended in sorted(self._ended_hosts.items()) if ended.status != "done"]
        if died:
            host, ended = died[0]
            return Died(None, None, f"host {host}", seconds, ended.detail or "failed")
        silent = [host for host in range(self.run.hosts) if host not in self._ended_hosts]
        if silent:
            assert self._process is not None
            said = " | ".join(line for line in self._other_lines if line.strip())
            cause = f"ended without a word ({self.backend.command} exited with code {self._process.returncode}" + (
                f": {said})" if said else ")"
            )
            return Died(None, None, f"host {', '.join(map(str, silent))}", seconds, cause)
        return self._fetched(seconds)

    def _fetched(self, seconds: float) -> Outcome:
        with tempfile.TemporaryDirectory(prefix="tpu_nb-pod-") as local:
            try:
                result = load_result(self.backend.fetch_results(self.run, Path(local)), 0)
            except (commands.CommandFailed, OSError, ValueError, ResultNotLoaded) as error:
                return Died(0, None, "host 0", seconds, f"finished, but its results could not be fetched ({error})")
            if result is None:
                return Died(0, None, "host 0", seconds, "finished without saving rank 0's results")
            # The reason host 0's workers obeyed (the kernel's own, the first stop winning, if none said it).
            return Succeeded(MappingProxyType({0: result}), seconds, self._stopping_step, self._stopping_reason or self._stopped_by)
