"""Where every rank is when a run goes quiet: the watchdog's setting, the stack dump files, the report the notebook shows.

Each worker process arms `faulthandler` on `STACKS_SIGNAL` with its dump
file in the exchange directory (`stack_dump_path`): on that signal the
interpreter writes every thread's Python stack there from C, so a rank
stuck in C++ (a collective, a compilation) still answers, even with the
GIL held. The kernel sends the signal, reads the files and folds them into
a `StackReport`. On a pod, each host's `train.py` does the asking for its
own workers when the notebook writes a stacks request in the run directory
(`tpu_nb.wire.run_directory`), and sends what they wrote as `StackAnswer`s.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

STACKS_SIGNAL = signal.SIGUSR2
MIN_THRESHOLD = 60.0
"""A learned threshold is never shorter: a step that takes a minute is not yet a stall."""
STEP_TIMES = 5.0
"""A learned threshold is this many median step times."""


@dataclass(frozen=True, slots=True)
class WatchdogSetting:
    """`--watchdog`: a fixed threshold in seconds, or None to learn it from the run (5x the median step, at least 60 s)."""

    seconds: float | None = None

    def threshold(self, median_step: float | None) -> float:
        if self.seconds is not None:
            return self.seconds
        return max(MIN_THRESHOLD, STEP_TIMES * median_step) if median_step is not None else MIN_THRESHOLD

    def describe(self) -> str:
        return f"{self.seconds:g}s" if self.seconds is not None else f"{STEP_TIMES:g}x the median step, at least {MIN_THRESHOLD:g}s"


def stack_dump_path(exchange_dir: Path, pid: int) -> Path:
    """Where worker process `pid` writes its threads' stacks when the kernel signals it."""
    return exchange_dir / f"stacks-{pid}.txt"


@dataclass(frozen=True, slots=True)
class StackAnswer:
    """A pod host's answer to stacks request `request`, for one worker process: faulthandler's text, or why there is none.

    Sent in order, in as many pieces as one line's size needs: the text is
    the pieces' texts joined, complete with the piece whose `last` is true.
    """

    request: int
    pid: int
    text: str
    last: bool = True
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class RankPlace:
    """Where one rank is: its step, the line of the user's code it is on, and the library call it waits in."""

    rank: int
    pid: int
    step: int | None
    where: str | None  # "In [5], line 12: xm.optimizer_step(optimizer)"; None when no frame is the user's
    waits_in: str | None  # the innermost library frame, "torch_xla/core/xla_model.py, line 4: all_reduce"
    stack: tuple[str, ...]  # the rank's thread, outermost first, one line per frame
    other_threads: tuple[str, ...] = ()  # the process's other threads that are not tpu_nb's own, one line each
    host: int | None = None  # on a pod: the host it runs on

    @property
    def label(self) -> str:
        """ "rank 3", or on a pod "rank 3 on host 1"."""
        return f"rank {self.rank}" if self.host is None else f"rank {self.rank} on host {self.host}"


@dataclass(frozen=True, slots=True)
class StackReport:
    """Every rank's place when a run went quiet (or when asked), with a verdict in words and its fix."""

    reason: str  # "rank 1's step has not moved for 65s (the watchdog waits 60s)", or "asked for"
    ranks: tuple[RankPlace, ...]  # where each rank is, by rank
    verdict: str  # what the places say, in words: "rank 1 is not in the collective the others wait in"
    fix: str  # what to do about it
    unanswered: tuple[str, ...] = ()  # processes that gave no stacks, and why
    chips: str | None = None  # what the chips were doing, where the runtime's metrics say

    def __str__(self) -> str:
        lines = [f"{self.verdict}", f"  Fix: {self.fix}", f"  ({self.reason})"]
        if self.chips:
            lines.append(f"  Chips: {self.chips}")
        for place in self.ranks:
            step = "" if place.step is None else f" at step {place.step}"
            lines.append(f"{place.label}{step} (pid {place.pid}): {place.where or 'not in your code'}")
            if place.waits_in:
                lines.append(f"    waiting in {place.waits_in}")
        lines += [f"no stacks from {text}" for text in self.unanswered]
        return "\n".join(lines)

    def _repr_pretty_(self, printer: object, cycle: bool) -> None:
        printer.text(str(self))  # type: ignore[attr-defined]

    def full_stacks(self) -> str:
        """Every rank's whole stack (outermost first) and its process's other threads."""
        parts = []
        for place in self.ranks:
            parts.append(f"{place.label} (pid {place.pid}):\n" + "\n".join(f"  {line}" for line in place.stack))
            parts += [f"  other thread: {line}" for line in place.other_threads]
        return "\n".join(parts)
