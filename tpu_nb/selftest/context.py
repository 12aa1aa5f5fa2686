"""What every check gets: this runtime, a scratch directory, its time limit, and launches whose events and output are kept."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpu_nb.kernel.launching import launch_observed
from tpu_nb.kernel.run.background import BackgroundRun
from tpu_nb.runtime.info import RuntimeInfo
from tpu_nb.wire.events import Event

LOG_LIMIT = 200_000
"""Characters of the runs' output kept for the report (the first ones: where a failure starts)."""


class Recorder:
    """Every event of one run, in order (a run observer)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type[Any]) -> list[Any]:
        return [event for event in self.events if isinstance(event, kind)]


@dataclass
class Context:
    """A selftest's shared state; `limit` is set by the runner before each check."""

    info: RuntimeInfo
    scratch: Path
    log: list[str] = field(default_factory=list)
    deadline: float = float("inf")
    _logged: int = 0

    def remaining(self) -> float:
        """Seconds left of the running check's limit (at least 1, so a run is still given a timeout)."""
        return max(1.0, self.deadline - time.monotonic())

    def write(self, stream: str, text: str) -> None:
        """Keep what a run printed (up to LOG_LIMIT characters in all)."""
        if self._logged >= LOG_LIMIT:
            return
        kept = text[: LOG_LIMIT - self._logged]
        self._logged += len(kept)
        self.log.extend(f"[{stream}] {line}" for line in kept.splitlines())

    def launch(self, fn: Callable[..., Any], *args: Any, **options: Any) -> tuple[Any, Recorder]:
        """`tpu_nb.launch(fn, *args)` without a dashboard and within the check's limit; its value and its events."""
        recorder = Recorder()
        options = {"progress": False, "timeout": self.remaining(), **options}
        return launch_observed(fn, args, options, [recorder], self.write), recorder

    @contextmanager
    def started(self, fn: Callable[..., Any], *args: Any, **options: Any) -> Iterator[tuple[BackgroundRun, Recorder]]:
        """The same in the background: its handle at once, and its events as they come; the run is ended on leaving,
        however the check went (a check that failed or was interrupted midway left its run holding the device)."""
        recorder = Recorder()
        options = {"progress": False, "timeout": self.remaining(), "background": True, **options}
        handle = launch_observed(fn, args, options, [recorder], self.write)
        try:
            yield handle, recorder
        finally:
            handle.kill()  # at once for a run that has ended

    def wait_for(self, condition: Callable[[], bool], what: str, fix: str) -> float:
        """Wait until `condition()` within the check's limit; the seconds it took. `CheckFailed` (what, fix) if it never came."""
        from tpu_nb.selftest.report import CheckFailed

        started = time.monotonic()
        while not condition():
            if time.monotonic() >= self.deadline:
                raise CheckFailed(f"{what} did not happen within the check's limit: {fix}")
            time.sleep(0.05)
        return time.monotonic() - started
