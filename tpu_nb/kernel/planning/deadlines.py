"""A run's deadline: the user's `--deadline` (read here: `parse_deadline`), or the end of a hosted session that says when it
ends (Kaggle's TPU).

The run stops gracefully before it, early enough for its stop and its last
checkpoint: what both took in this run, measured as it runs (`StopNeeds`),
and before anything was measured a guess that a short run does not spend.
"""

from __future__ import annotations

import datetime
import re
import time
from dataclasses import dataclass

from tpu_nb.basics.units import UnitError, parse_duration
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


LONGEST_DEADLINE = 366 * 24 * 3600.0
"""A deadline further away than this is a typo (99999999h), not a plan."""

_CLOCK_TIME = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(z|utc|gmt|[+-]\d{2}:?\d{2})?", re.IGNORECASE)
_DEADLINE_HELP = "give a duration such as 8h30m, or a clock time such as 21:00 (this machine's zone) or 21:00+02:00"


def parse_deadline(text: str, now: datetime.datetime) -> datetime.datetime:
    """When `--deadline` falls, as an aware time: a duration from `now` ("8h30m"), or a clock time, today or else
    tomorrow, in this machine's zone ("21:00": UTC on Colab and Kaggle) or the one it names ("21:00+02:00",
    "21:00 UTC").

    This machine's zone counts at the offset in force on the deadline's own day: across a daylight-saving change,
    tomorrow's 20:00 is not today's offset from UTC (an hour off).
    """
    now = now if now.tzinfo is not None else now.astimezone()
    clock = _CLOCK_TIME.fullmatch(text.strip())
    if clock is None:
        try:
            seconds = parse_duration(text, "--deadline")
        except UnitError:
            raise UnitError(f"--deadline {text}: {_DEADLINE_HELP}.") from None
        if seconds > LONGEST_DEADLINE:
            raise UnitError(f"--deadline {text}: that is more than a year away; {_DEADLINE_HELP}.")
        return now + datetime.timedelta(seconds=seconds)
    hour, minute, second = int(clock[1]), int(clock[2]), int(clock[3] or 0)
    zone = _zone(clock[4]) if clock[4] else None
    if hour > 23 or minute > 59 or second > 59 or (clock[4] and zone is None):
        raise UnitError(f"--deadline {text}: {_DEADLINE_HELP}.")
    time_of_day = datetime.time(hour, minute, second)
    if zone is None:
        # A naive time made aware by astimezone() takes the local offset in force at that time, not now's.
        today = now.astimezone().date()
        at = datetime.datetime.combine(today, time_of_day).astimezone()
        return at if at > now else datetime.datetime.combine(today + datetime.timedelta(days=1), time_of_day).astimezone()
    at = datetime.datetime.combine(now.astimezone(zone).date(), time_of_day, zone)
    return at if at > now else at + datetime.timedelta(days=1)


def _zone(text: str) -> datetime.tzinfo | None:
    """ "Z", "UTC", "GMT", "+02:00" or "-0530" as a zone (None for an offset no zone has)."""
    if text.upper() in ("Z", "UTC", "GMT"):
        return datetime.timezone.utc
    sign = -1 if text[0] == "-" else 1
    hours, minutes = int(text[1:3]), int(text[-2:])
    if hours > 14 or minutes > 59:
        return None
    return datetime.timezone(sign * datetime.timedelta(hours=hours, minutes=minutes))


def _clock(at: float) -> str:
    """A time of day in this machine's zone, named: a clock time means this machine's clock (UTC on Colab and Kaggle)."""
    return datetime.datetime.fromtimestamp(at).astimezone().strftime("%H:%M:%S %Z")
