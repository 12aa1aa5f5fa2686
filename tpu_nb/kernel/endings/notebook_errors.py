"""Exceptions a launch raises in the notebook, each rendered without noise.

The Python API raises tpu_nb's own classes, never IPython's `UsageError`
itself: `LaunchRefused` when nothing started (built by `refused`, which writes
its header; `magic_refused` words the refusals of the magics that start no run
alike, `call_refused` those of a Python entry that starts none, `tpu_nb.study`), `NotReturned` when a run ended but part of what it was to hand
back did not come back, `RunEnded` when a handle is asked what only a live
run can answer. The magics show them as IPython shows a `UsageError`.
"""

from __future__ import annotations

from collections.abc import Iterable

from IPython.core.error import UsageError


class _Explained(UsageError):
    """A mistake the message explains, with its fix: shown without a traceback."""

    def _render_traceback_(self) -> list[str]:
        # IPython prints only its exact UsageError class without a traceback;
        # a subclass would show tpu_nb's own frames (IPython 7.34 to 9).
        return [f"{type(self).__name__}: {self}"]


class LaunchRefused(_Explained):
    """Nothing was started: the message says what to fix first."""


def refused(problems: str | Iterable[str], *, pod: bool = False, by: str = "tpu_nb") -> LaunchRefused:
    """The one way a refusal is worded: "tpu_nb did not start the run:" then each problem with its fix."""
    return LaunchRefused(_worded(f"{by} did not start {'the pod run' if pod else 'the run'}", problems))


def magic_refused(magic: str, undone: str, problems: str | Iterable[str]) -> UsageError:
    """A magic that starts no run refusing, in `refused`'s words: "%tpu_runs did not list the runs:" then each problem with its fix."""
    return UsageError(_worded(f"{magic} did not {undone}", problems))


def call_refused(name: str, undone: str, problems: str | Iterable[str]) -> LaunchRefused:
    """A Python entry that starts no run refusing, in `refused`'s words: "tpu_nb.study did not make the study:" then each problem."""
    return LaunchRefused(_worded(f"{name} did not {undone}", problems))


def _worded(header: str, problems: str | Iterable[str]) -> str:
    listed = [problems] if isinstance(problems, str) else list(problems)
    return f"{header}:\n" + "\n".join(f"- {problem}" for problem in listed)


class NotReturned(_Explained):
    """The run ended, but part of what it was to hand back did not come back: which, why, and what to do."""


class RunEnded(_Explained):
    """A run's handle was asked what only a live run can answer (where its ranks are)."""


class WorkerError(Exception):
    """The user's code raised in a worker (on a pod: on one of its hosts).

    IPython shows `_render_traceback_()` instead of our own frames: the
    worker's traceback, pointing into the cell as the user wrote it.
    """

    def __init__(
        self,
        rank: int | None,
        world_size: int,
        type_name: str,
        message: str,
        traceback_lines: list[str],
        advice: str | None = None,
        host: int | None = None,
    ) -> None:
        super().__init__(f"{where_raised(rank, world_size, host)} raised {type_name}: {message}")
        self.rank = rank
        self.world_size = world_size
        self.host = host
        self.type_name = type_name
        self.traceback_lines = traceback_lines
        self.advice = advice
        """What to change, when tpu_nb recognises the error (the device ran out of memory)."""

    def _render_traceback_(self) -> list[str]:
        where = where_raised(self.rank, self.world_size, self.host)
        footer = (
            f"(raised in the worker for {where}; every worker was stopped)"
            if self.host is None
            else f"(raised on {where}; every host was stopped)"
        )
        return [*self.traceback_lines, footer, *([self.advice] if self.advice else [])]

    def __str__(self) -> str:
        return "\n".join([self.args[0], "", *self.traceback_lines, *([self.advice] if self.advice else [])])


def where_raised(rank: int | None, world_size: int, host: int | None) -> str:
    """ "rank 1 of 4", "host 1 (rank 4 of 16)", or "host 1 (its prepared cells)"."""
    ranked = f"rank {rank} of {world_size}"
    if host is None:
        return ranked
    return f"host {host} ({'its prepared cells' if rank is None else ranked})"


class WorkerDied(RuntimeError):
    """A worker process ended without a Python exception (a signal, an abort)."""

    def _render_traceback_(self) -> list[str]:
        return [f"WorkerDied: {self}"]


class TrainingInterrupted(KeyboardInterrupt):
    """The run was interrupted; every worker was terminated."""

    def _render_traceback_(self) -> list[str]:
        return [f"TrainingInterrupted: {self}"]


class TrainingTimedOut(TimeoutError):
    """`--timeout` expired; every worker was terminated."""

    def _render_traceback_(self) -> list[str]:
        return [f"TrainingTimedOut: {self}"]
