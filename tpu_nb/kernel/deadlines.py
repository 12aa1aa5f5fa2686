"""A run's deadline: the user's `--deadline`, or the end of a hosted session that says when it ends (Kaggle's TPU).

The run stops gracefully before it, early enough for its last checkpoint: three
times its longest save so far, measured as it runs.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass

from tpu_nb.runtime import Accelerator, Platform, RuntimeInfo
from tpu_nb.wire.checkpoints import CheckpointError, parse_deadline

from .errors import LaunchRefused

KAGGLE_SESSION_HOURS = 9.0
"""Kaggle stops a TPU session 9 hours after it started."""
FIRST_SAVE_MARGIN = 10 * 60.0
"""Seconds before a deadline a run stops while no save was measured yet."""
SAVE_MARGIN_MINIMUM = 60.0
SHARE_OF_RUN = 0.2
"""A short run's deadline keeps at most this share of its time for the last save (a 30 s deadline stops after 24 s)."""


@dataclass(frozen=True, slots=True)
class Deadline:
    """When a run must have stopped, and why."""

    at: float  # Unix time
    session_end: bool  # Kaggle's session ends then (not the user's --deadline)

    def stop_at(self, longest_save: float | None, started: float) -> float:
        """When to stop a run started at `started`: early enough for its last checkpoint.

        Three times its longest save so far (at least a minute; ten before any was
        measured), but never more than a fifth of the time the run had.
        """
        margin = FIRST_SAVE_MARGIN if longest_save is None else max(SAVE_MARGIN_MINIMUM, 3 * longest_save)
        return self.at - min(margin, SHARE_OF_RUN * max(self.at - started, 0.0))

    def describe(self, longest_save: float | None, started: float, saves: bool) -> str:
        """What the dashboard says at the start; `saves`: the run has --checkpoint."""
        stop = _clock(self.stop_at(longest_save, started))
        how = f"tpu_nb saves and stops at {stop}" if saves else f"tpu_nb stops the run at {stop} (add --checkpoint DIR to save it then)"
        if self.session_end:
            return f"Kaggle ends this session at {_clock(self.at)}; {how} (--deadline to choose)"
        return f"deadline {_clock(self.at)}: {how}"


def deadline_for(text: str | None, info: RuntimeInfo | None, now: float | None = None) -> Deadline | None:
    """The user's --deadline, or on Kaggle's TPU the session's end; `LaunchRefused` for a deadline that cannot be read."""
    now = time.time() if now is None else now
    if text is not None:
        try:
            at = parse_deadline(text, datetime.datetime.fromtimestamp(now))
        except CheckpointError as error:
            raise LaunchRefused(f"tpu_nb did not start the run:\n- {error}") from None
        return Deadline(at.timestamp(), session_end=False)
    if info is not None and info.platform is Platform.KAGGLE and info.accelerator is Accelerator.TPU and info.started_at is not None:
        return Deadline(info.started_at + KAGGLE_SESSION_HOURS * 3600, session_end=True)
    return None


def _clock(at: float) -> str:
    return datetime.datetime.fromtimestamp(at).strftime("%H:%M:%S")
