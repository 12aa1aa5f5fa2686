"""The watchdog in each worker process: notices a rank that has stopped moving, at no cost per step.

The heartbeat thread calls `StepWatchdog.observe` once a second with what
it reads anyway (each rank's step and count of `report()`/Trainer calls,
the process's XLA compilations); a step, a call or a finished compilation
counts as moving. The threshold is `--watchdog`'s, or learned from the
run: 5x the median step time, at least 60 s. A stall is said once, with
how long a compilation has been running if one is, and said again only
after the rank moved in between.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tpu_nb.wire.events import Stalled
from tpu_nb.wire.stacks import WatchdogSetting

STEP_SAMPLES = 200  # step times the median is taken over: the recent ones


@dataclass(frozen=True, slots=True)
class Activity:
    """What the heartbeat read of one process: every rank's step and call count, and its XLA compilations."""

    steps: Mapping[int, int | None]
    calls: Mapping[int, int]
    compiles_finished: int
    compiles_started: int


class StepWatchdog:
    """Per process: which ranks have not moved for longer than the threshold."""

    def __init__(self, setting: WatchdogSetting, clock: Callable[[], float] = time.monotonic) -> None:
        self.setting = setting
        self._clock = clock
        self._seen: dict[int, tuple[int | None, int]] = {}  # rank -> (step, calls) when it last moved
        self._moved_at: dict[int, float] = {}
        self._stepped_at: dict[int, float] = {}
        self._step_seconds: deque[float] = deque(maxlen=STEP_SAMPLES)
        self._compiles_finished = -1
        self._compiling_since: float | None = None
        self._said: set[int] = set()

    @property
    def threshold(self) -> float:
        median = statistics.median(self._step_seconds) if self._step_seconds else None
        return self.setting.threshold(median)

    def observe(self, activity: Activity, done: frozenset[int] = frozenset()) -> list[Stalled]:
        """The ranks that have just been still for longer than the threshold (each said once per stall).

        `done`: ranks not waited for (their code returned or raised, or they stop gracefully).
        """
        now = self._clock()
        compiled = activity.compiles_finished != self._compiles_finished
        self._compiles_finished = activity.compiles_finished
        if activity.compiles_started > activity.compiles_finished:
            self._compiling_since = self._compiling_since or now
        else:
            self._compiling_since = None
        stalled = []
        threshold = self.threshold
        for rank, step in activity.steps.items():
            seen = (step, activity.calls.get(rank, 0))
            if rank not in self._seen or seen != self._seen[rank] or compiled or rank in done:
                self._moved(rank, seen, now)
                continue
            still = now - self._moved_at[rank]
            if still > threshold and rank not in self._said:
                self._said.add(rank)
                compiling = None if self._compiling_since is None else now - self._compiling_since
                stalled.append(Stalled(rank, step, still, threshold, compiling))
        return stalled

    def _moved(self, rank: int, seen: tuple[int | None, int], now: float) -> None:
        before = self._seen.get(rank, (None, 0))[0]
        step = seen[0]
        if step is not None and before is not None and step > before and rank in self._stepped_at:
            self._step_seconds.append((now - self._stepped_at[rank]) / (step - before))
        if step != before or rank not in self._stepped_at:
            self._stepped_at[rank] = now
        self._seen[rank] = seen
        self._moved_at[rank] = now
        self._said.discard(rank)
