"""A pod run followed from the notebook: the hosts' JSON lines feed the same dashboard as a local run.

The backend (gcloud or kubectl) starts `train.py` on every host and gives
back one local process whose output is every host's output. Each host's
events become the dashboard's worker row for that host; rank 0's progress
(on host 0) drives the charts. A failure on any host ends the run on every
host (the others would wait for it forever in a collective), and so do a
Kill, a second interrupt and the timeout. A graceful stop writes, on every
host, the step to stop at: a few seconds of steps past the last one seen, so
that every host reaches it before it stops.
"""

from __future__ import annotations

import dataclasses
import math
import queue
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import IO, Literal, Protocol

from tpu_nb.wire.events import Event, Output, Progress, Stopping, WorkerStarted
from tpu_nb.wire.host_lines import MAX_LINE_BYTES, HostEnded, decode
from tpu_nb.wire.limits import cap_text
from tpu_nb.wire.results import ExceptionReport, load_result

from .. import output as notebook_output
from ..endings import Died, Ending, Outcome, Raised, Stopped, Succeeded, ending_of
from ..errors import LaunchRefused
from ..options import LaunchOptions
from ..progress.display import ProgressDisplay, make_display
from ..runs import RunObserver
from . import commands
from .program import RunDirectory, remove_staging
from .reaper import Reaper

POLL_SECONDS = 0.1
STOP_AHEAD_SECONDS = 10.0  # how far ahead of the last step seen a graceful stop aims: time for the stop to reach every host
STREAM_END_WAIT = 10.0  # seconds for the backend's stream to end after every host said it ended
PLAIN_LINES_KEPT = 3  # of the backend's own output, for an error that needs them
PLAIN_LINE_BYTES = 2000  # of each of them kept (head and tail)


class PodBackend(Protocol):
    """Where a pod run runs: a TPU VM slice through gcloud, or GKE through kubectl."""

    @property
    def label(self) -> str: ...

    @property
    def command(self) -> str:
        """The command-line tool it drives ("gcloud", "kubectl")."""
        ...

    def start(self, run: RunDirectory) -> subprocess.Popen[bytes]: ...

    def stop(self, run: RunDirectory, step: int | None) -> None: ...

    def kill(self, run: RunDirectory) -> None: ...

    def end(self, run_name: str) -> None:
        """End run `run_name` everywhere (on every host, in the cluster): this one, or one a dead kernel left."""
        ...

    def end_commands(self, run_name: str) -> list[list[str]]:
        """The commands `end` runs (for the reaper, and for the user to run)."""
        ...

    def fetch_results(self, run: RunDirectory, into: Path) -> Path: ...

    def clean_up(self, run: RunDirectory) -> None: ...


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


class PodRun:
    """One run on a pod slice, from its start to its ending; the same life as `tpu_nb.kernel.runs.Run`."""

    def __init__(
        self,
        backend: PodBackend,
        run: RunDirectory,
        options: LaunchOptions,
        title: str,
        write: notebook_output.Write = notebook_output.write_to_sys,
        observers: Sequence[RunObserver] = (),
        runtime_label: str | None = None,
    ) -> None:
        self.backend = backend
        self.runtime_label = runtime_label or backend.label
        self.run = run
        self.options = options
        self.title = title
        self._write = write
        self._observers: list[RunObserver] = [notebook_output.OutputPrinter(all_ranks=False, write=write), *observers]
        self._process: subprocess.Popen[bytes] | None = None
        self._reaper: Reaper | None = None
        self._lines: _Lines | None = None
        self._started_at = 0.0
        self._hosts_started: set[int] = set()
        self._ended_hosts: dict[int, HostEnded] = {}
        self._raised: tuple[int, ExceptionReport] | None = None
        self._steps: deque[tuple[float, int]] = deque(maxlen=20)  # host 0's (time, step)
        self._plain_lines: deque[str] = deque(maxlen=PLAIN_LINES_KEPT)
        self._origins: dict[str, int] = {}  # a host's train.py ("hostname:pid") -> its row
        self._stopping_step: int | None = None
        self._stop_requested_at: float | None = None
        self._display: ProgressDisplay | None = None
        self._stop_reason: Literal["interrupt", "timeout"] | None = None
        self._kill_requested = False
        self._ended = False
        self._stream_ended_at: float | None = None

    def start(self) -> None:
        """Show the dashboard, copy the run to the hosts and start it there."""
        if self.options.progress:
            self._display = make_display(self.title, self.runtime_label, self.run.hosts, worker_noun="host")
            self._observers.append(self._display)
        # First: if the kernel dies from here on, the reaper ends the run everywhere.
        self._reaper = Reaper.start(self.backend.end_commands(self.run.name))
        self._process = self.backend.start(self.run)
        self._reaper.watch_group(self._process.pid)
        self._lines = _Lines(self._process)
        self._started_at = time.monotonic()

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def stopping(self) -> bool:
        return self._stop_requested_at is not None

    @property
    def stopping_note(self) -> str:
        return "stopping every host at the same step, a few seconds ahead (interrupt again to stop at once)."

    def poll(self) -> None:
        assert self._lines is not None and self._process is not None
        for stream, line in self._lines.take(POLL_SECONDS):
            self._on_line(stream, line)
        if self._ended:
            return
        now = time.monotonic()
        failed = [host for host, ended in self._ended_hosts.items() if ended.status != "done"]
        if failed:
            self._end_everywhere()  # the other hosts would wait for the failed one forever
        elif self._kill_requested:
            self.kill_now()
        elif self.options.timeout is not None and now - self._started_at > self.options.timeout:
            self._stop_reason = "timeout"
            self._end_everywhere()
        elif self.stopping and self._stopping_step is None and now - (self._stop_requested_at or now) > self._stop_grace:
            self._stop_reason = "interrupt"
            self._end_everywhere()
        elif len(self._ended_hosts) == self.run.hosts or self._lines.finished:
            self._stream_ended_at = self._stream_ended_at or now
            if self._process.poll() is not None or now - self._stream_ended_at > STREAM_END_WAIT:
                commands.end(self._process)
                self._ended = True

    @property
    def _stop_grace(self) -> float:
        return self.options.stop_grace + 2 * STOP_AHEAD_SECONDS

    def request_stop(self) -> bool:
        """Graceful stop: every host stops at the same step, a little ahead. False if one was already asked for."""
        if self.stopping:
            return False
        self._stop_requested_at = time.monotonic()
        step = self._stop_step()
        threading.Thread(target=self._send_stop, args=(step,), name="tpu_nb-pod-stop", daemon=True).start()
        return True

    def _stop_step(self) -> int | None:
        if not self._steps:
            return None  # no step seen yet: each host stops one past its furthest rank
        (first_time, first_step), (last_time, last_step) = self._steps[0], self._steps[-1]
        if last_time - first_time >= 0.5:
            rate = (last_step - first_step) / (last_time - first_time)
        else:  # too few reports yet: the rate since the start (compiling included), doubled to stay ahead
            rate = 2 * (last_step + 1) / max(last_time - self._started_at, 1e-3)
        elapsed = time.monotonic() - last_time
        return last_step + math.ceil(rate * (elapsed + STOP_AHEAD_SECONDS)) + 1

    def _send_stop(self, step: int | None) -> None:
        try:
            self.backend.stop(self.run, step)
        except commands.CommandFailed as error:
            self._write("stderr", f"tpu_nb: the stop did not reach every host ({error}); Kill ends the run.\n")

    def request_kill(self) -> None:
        self._kill_requested = True

    def kill_now(self) -> None:
        self._stop_reason = self._stop_reason or "interrupt"
        self._end_everywhere()

    def finish(self) -> Ending:
        assert self._ended, "finish() is for a run that has ended"
        ending = self._ending()
        if self._display is not None:
            self._display.finish(ending.status, ending.text)
        return ending

    def close(self) -> None:
        """Leave nothing running on any host, even after an unexpected error in the kernel."""
        if self._process is not None and not self._ended:
            self._end_everywhere()
        if self._process is not None:
            try:
                self.backend.clean_up(self.run)
            except commands.CommandFailed as error:
                self._write("stderr", f"tpu_nb: could not clean up after the run ({error}).\n")
        if self._reaper is not None:
            self._reaper.release()
        remove_staging(self.run)

    def _end_everywhere(self) -> None:
        """End the run on every host, then the local stream; even if the user keeps pressing interrupt."""
        assert self._process is not None
        while True:
            try:
                self.backend.kill(self.run)
                break
            except KeyboardInterrupt:
                continue
            except commands.CommandFailed as error:
                self._write("stderr", f"tpu_nb: could not end the run on every host ({error}); check them yourself.\n")
                break
        commands.end(self._process)
        assert self._lines is not None
        for stream, line in self._lines.take(0):
            self._on_line(stream, line)
        self._ended = True

    def _on_line(self, stream: str, line: str) -> None:
        decoded = decode(line)
        if decoded.event is None or decoded.host is None:
            # gcloud's or kubectl's own words, or C++ logs of any host: said when the run fails
            # without an explanation from the hosts, shown live only with --all-ranks-output.
            # A line that only looks like an event is always shown: it is somebody's output.
            self._plain_lines.append(cap_text(line.rstrip("\n"), PLAIN_LINE_BYTES))
            if self.options.all_ranks_output or decoded.malformed:
                self._deliver(Output(None, stream, line))
            return
        host, event = self._host_of(decoded.origin, decoded.host), decoded.event
        if isinstance(event, HostEnded):
            self._ended_hosts.setdefault(host, event)
        elif isinstance(event, ExceptionReport):
            if self._raised is None:
                self._raised = (host, event)
        elif isinstance(event, Output):
            if host == 0 and event.rank in (0, None):
                self._deliver(event)
            elif self.options.all_ranks_output:
                self._deliver(Output(None, event.stream, _prefixed(f"[host {host}] ", event.text)))
        elif isinstance(event, Progress):
            if host == 0:  # rank 0's: on one machine of a simulation, every host has a rank 0
                if event.step is not None:
                    self._steps.append((time.monotonic(), event.step))
                self._deliver(event)
        elif isinstance(event, WorkerStarted):
            if host not in self._hosts_started:
                self._hosts_started.add(host)
                self._deliver(WorkerStarted(host, self.run.hosts, event.pid, event.device))
        else:
            if isinstance(event, Stopping) and host == 0:
                self._stopping_step = event.step
            self._deliver(dataclasses.replace(event, rank=host))  # one worker row per host

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

    def _deliver(self, event: Event) -> None:
        for observer in self._observers:
            observer.on_event(event)

    def _ending(self) -> Ending:
        seconds = time.monotonic() - self._started_at
        refused = [(host, ended.detail) for host, ended in sorted(self._ended_hosts.items()) if ended.status == "refused"]
        if refused:
            text = "\n".join(f"- {detail}" for _host, detail in refused)
            return Ending("failed", text, LaunchRefused(f"the hosts did not start the run:\n{text}"))
        return ending_of(self._outcome(seconds))

    def _outcome(self, seconds: float) -> Outcome:
        if self._raised is not None:
            host, report = self._raised
            return Raised(report, seconds, host)
        if self._stop_reason is not None:
            return Stopped(self._stop_reason, seconds, self._steps[-1][1] if self._steps else None)
        died = [(host, ended) for host, ended in sorted(self._ended_hosts.items()) if ended.status != "done"]
        if died:
            host, ended = died[0]
            return Died(None, None, f"host {host}", seconds, ended.detail or "failed")
        silent = [host for host in range(self.run.hosts) if host not in self._ended_hosts]
        if silent:
            assert self._process is not None
            said = " | ".join(line for line in self._plain_lines if line.strip())
            cause = f"ended without a word ({self.backend.command} exited with code {self._process.returncode}" + (
                f": {said})" if said else ")"
            )
            return Died(None, None, f"host {', '.join(map(str, silent))}", seconds, cause)
        return self._fetched(seconds)

    def _fetched(self, seconds: float) -> Outcome:
        with tempfile.TemporaryDirectory(prefix="tpu_nb-pod-") as local:
            try:
                result = load_result(self.backend.fetch_results(self.run, Path(local)), 0)
            except (commands.CommandFailed, OSError, ValueError) as error:
                return Died(0, None, "host 0", seconds, f"finished, but its results could not be fetched ({error})")
            if result is None:
                return Died(0, None, "host 0", seconds, "finished without saving rank 0's results")
            return Succeeded(MappingProxyType({0: result}), seconds, self._stopping_step)


def _prefixed(prefix: str, text: str) -> str:
    return "".join(prefix + piece for piece in text.splitlines(keepends=True))
