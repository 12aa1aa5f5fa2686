"""A run's deadline: the user's `--deadline`, or the end of a hosted session that says when it ends (Kaggle's TPU).

The run stops gracefully before it, early enough for its stop and its last
checkpoint: what both took in this run, measured as it runs (`StopNeeds`),
and before anything was measured a guess that a short run does not spend.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass

from tpu_nb.basics.units import UnitError, parse_deadline
from tpu_nb.kernel.endings.notebook_errors import refused
from tpu_nb.runtime import Accelerator, Platform, RuntimeInfo

KAGGLE_SESSION_HOURS = 9.0
"""Kaggle stops a TPU session 9 hours after it started."""
FIRST_SAVE_MARGIN = 10 * 60.0
"""Seconds before a deadline a run stops while no save was measured yet (a guess)."""
SAVE_MARGIN_MINIMUM = 60.0
"""Seconds before a deadline a run stops at the least once a save was measured (a guess: saves vary)."""
SHARE_OF_RUN = 0.2
"""A short run spends at most this share of its time on the guesses (a 30 s deadline stops after 24 s at the latest)."""
SAVE_MARGIN = 1.5
"""The last save may take longer than the longest so far: half as long again."""


@dataclass(frozen=True, slots=True)
class StopNeeds:
    """What stopping takes in a run, as measured so far."""

    stop: float | None  # seconds a graceful stop waits for its step boundary (None before a step was timed)
    save: float | None  # seconds the longest checkpoint took to write and check (None: none yet, or no --checkpoint)

    @property
    def seconds(self) -> float:
        return (self.stop or 0.0) + SAVE_MARGIN * (self.save or 0.0)


@dataclass(frozen=True, slots=True)
class Deadline:
    """When a run must have stopped, and why."""

    at: float  # Unix time
    session_end: bool  # Kaggle's session ends then (not the user's --deadline)

    def stop_at(self, needs: StopNeeds, started: float) -> float:
        """When to stop a run started at `started`: early enough for its stop and its last checkpoint.

        What they took in this run, measured, comes first, however long; the
        guesses (ten minutes before a save was measured, one minute after) take
        at most a fifth of the time the run had.
        """
        guess = FIRST_SAVE_MARGIN if needs.save is None else SAVE_MARGIN_MINIMUM
        return self.at - max(needs.seconds, min(guess, SHARE_OF_RUN * max(self.at - started, 0.0)))

    def describe(self, needs: StopNeeds, started: float, saves: bool) -> str:
        """What the dashboard says at the start; `saves`: the run has --checkpoint."""
        stop = _clock(self.stop_at(needs, started))
        how = f"tpu_nb saves and stops at {stop}" if saves else f"tpu_nb stops the run at {stop} (add --checkpoint DIR to save it then)"
        if self.session_end:
            return f"Kaggle ends this session at {_clock(self.at)}; {how} (--deadline to choose)"
        return f"deadline {_clock(self.at)}: {how}"


def deadline_for(text: str | None, info: RuntimeInfo | None, now: float | None = None) -> Deadline | None:
    """The user's --deadline, or on Kaggle's TPU the session's end; `LaunchRefused` for a deadline that cannot be read."""
    now = time.time() if now is None else now
    if text is not None:
        try:
            at = parse_deadline(text, datetime.datetime.fromtimestamp(now).astimezone())
        except UnitError as error:
            raise refused(str(error)) from None
        return Deadline(at.timestamp(), session_end=False)
    if info is not None and info.platform is Platform.KAGGLE and info.accelerator is Accelerator.TPU and info.started_at is not None:
        return Deadline(info.started_at + KAGGLE_SESSION_HOURS * 3600, session_end=True)
    return None


def _clock(at: float) -> str:
    """A time of day in this machine's zone, named: a clock time means this machine's clock (UTC on Colab and Kaggle)."""
    return datetime.datetime.fromtimestamp(at).astimezone().strftime("%H:%M:%S %Z")
