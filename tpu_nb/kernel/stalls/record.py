"""What the watchdog knows of a run, local or pod, and its rules: which ranks run where and at which step, who went silent, which stall was said.

A "source" is what the kernel hears from: a worker process on this machine
(its pid), or a host of a pod. A "key" names a rank or a worker process in
the run: its number (rank, pid) on this machine, (host, number) on a pod,
where every host has its own rank 0 and pids.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from tpu_nb.wire.events import Heartbeat, Progress, Stalled, WorkerFinished, WorkerRaised, WorkerStarted
from tpu_nb.wire.host_lines import HostEvent
from tpu_nb.wire.stacks import MIN_THRESHOLD, WatchdogSetting

SILENT_EXTRA = 10.0
"""A source silent this much longer than the threshold has a heartbeat thread that cannot run: its stacks are asked for."""

Source = TypeVar("Source", bound=Hashable)
Key = TypeVar("Key", bound=Hashable)


@dataclass(frozen=True)
class Silence(Generic[Source]):
    """Sources that have sent nothing for over `seconds`, said for the first time."""

    sources: tuple[Source, ...]
    seconds: float


class StallRecord(Generic[Source, Key]):
    """Per run: each rank's process, thread and step, the ranks done, when each source was last heard, what was said (thread-safe)."""

    def __init__(
        self, setting: WatchdogSetting | None, source_of: Callable[[Key], Source], clock: Callable[[], float] = time.monotonic
    ) -> None:
        """`source_of`: the source a worker process's key is heard through (itself on this machine, its host on a pod)."""
        self._silence_after = None if setting is None else (setting.seconds or MIN_THRESHOLD) + SILENT_EXTRA
        self._source_of = source_of
        self._clock = clock
        self._lock = threading.Lock()  # the thread that follows the run, and the user's asking for stacks
        self._threads: dict[Key, dict[int, Key]] = {}  # process -> {thread id -> rank}
        self._steps: dict[Key, int | None] = {}
        self._done: set[Key] = set()  # ranks that finished or raised
        self._heard: dict[Source, float] = {}  # source -> when it last sent anything
        self._silence_said: set[Source] = set()
        self._stall_said_at: float | None = None

    def follow(self, event: HostEvent, key: Callable[[int], Key]) -> None:
        """What an event tells of its rank: where it runs, its step, that it ended (`key` makes a rank's or pid's number a key)."""
        with self._lock:
            if isinstance(event, WorkerStarted):
                self._threads.setdefault(key(event.pid), {})[event.thread] = key(event.rank)
                self._steps.setdefault(key(event.rank), None)
            elif isinstance(event, (Heartbeat, Progress, Stalled)) and event.step is not None:
                self._steps[key(event.rank)] = event.step
            elif isinstance(event, (WorkerFinished, WorkerRaised)):
                self._done.add(key(event.rank))

    def heard(self, source: Source) -> None:
        """The source sent something: it is not silent, and a later silence is a new one."""
        with self._lock:
            self._heard[source] = self._clock()
            self._silence_said.discard(source)

    def process_of(self, rank: Key) -> Key | None:
        """The worker process the rank runs in, once it started."""
        with self._lock:
            return next((process for process, ranks in self._threads.items() if rank in ranks.values()), None)

    def ranks_in(self, process: Key) -> dict[int, Key]:
        """The ranks that run in a worker process, by their thread ids (none for a process no rank started in)."""
        with self._lock:
            return dict(self._threads.get(process, {}))

    def running(self) -> dict[Key, dict[int, Key]]:
        """The worker processes with a rank still at work (all their ranks, by thread id): the ones to ask for stacks."""
        with self._lock:
            return {process: dict(ranks) for process, ranks in self._threads.items() if self._at_work(ranks)}

    def steps(self) -> dict[Key, int | None]:
        """Each rank's last step heard (None before its first)."""
        with self._lock:
            return dict(self._steps)

    def silent(self) -> Silence[Source] | None:
        """The sources with a rank at work that have sent nothing for longer than the threshold allows, once per silence.

        None when there are none, or the watchdog is off.
        """
        if self._silence_after is None:
            return None
        now = self._clock()
        with self._lock:
            working = {self._source_of(process) for process, ranks in self._threads.items() if self._at_work(ranks)}
            silent = tuple(
                source
                for source, heard in self._heard.items()
                if now - heard > self._silence_after and source not in self._silence_said and source in working
            )
            self._silence_said.update(silent)
        return Silence(silent, self._silence_after) if silent else None

    def new_stall(self, threshold: float) -> bool:
        """Whether a rank's stall is to be reported: not when one was within its threshold (the same stall, seen by another rank)."""
        now = self._clock()
        with self._lock:
            if self._stall_said_at is not None and now - self._stall_said_at < threshold:
                return False
            self._stall_said_at = now
            return True

    def _at_work(self, ranks: dict[int, Key]) -> bool:
        return bool(set(ranks.values()) - self._done)


def ranks_text(ranks: Iterable[int]) -> str:
    """Ranks in order, as a reader lists them: "0, 3"."""
    return ", ".join(str(rank) for rank in sorted(ranks))


def of_ranks(ranks_by_thread: Mapping[int, int]) -> str:
    """What follows a worker process's name: " (rank 0, 3)", the ranks it runs; "" when none is known."""
    return f" (rank {ranks_text(ranks_by_thread.values())})" if ranks_by_thread else ""
