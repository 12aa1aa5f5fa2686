"""The kernel's channel to the workers: a graceful stop request, in shared memory.

A page of memory shared through fork, not a message: a worker busy in a long
XLA execution or compilation does not need to read anything, and checking
the request at a step boundary costs one memory read.

Workers stop at the same step, because ranks that stop at different steps
would leave the others waiting in a collective forever. Each rank records
the step it is at; the first rank that sees the request picks the stop step
as one past the furthest rank, and every rank stops when it gets there.
The request carries its reason (`stop_reason.StopReason`, as its code), so a
worker says who stopped it; the first request wins, a later one changes
nothing (neither its reason nor its step).

A Trainer's checkpoint by the clock (`--every 15m`) is agreed the same way:
every rank takes part in a Trainer's save, so the rank that finds one due
asks for it, and every rank saves at one step past the furthest rank.
"""

from __future__ import annotations

import mmap
import multiprocessing
import struct

from tpu_nb.wire.stop_reason import StopReason

_SLOT = struct.Struct("<q")
_REQUESTED, _STOP_STEP, _SAVE_STEP, _FIRST_RANK = 0, 1, 2, 3  # _REQUESTED holds the reason's code (0: none)
_UNSET = -1


class StopRequest:
    """Created in the kernel before forking; read and written by every worker."""

    def __init__(self, ranks: int) -> None:
        self.ranks = ranks
        self._memory = mmap.mmap(-1, _SLOT.size * (_FIRST_RANK + ranks))
        self._lock = multiprocessing.get_context("fork").Lock()
        self._write(_STOP_STEP, _UNSET)
        self._write(_SAVE_STEP, _UNSET)
        for rank in range(ranks):
            self._write(_FIRST_RANK + rank, _UNSET)

    def _read(self, slot: int) -> int:
        return _SLOT.unpack_from(self._memory, slot * _SLOT.size)[0]  # type: ignore[no-any-return]

    def _write(self, slot: int, value: int) -> None:
        _SLOT.pack_into(self._memory, slot * _SLOT.size, value)

    def request(self, reason: StopReason) -> None:
        """Kernel side: ask every worker to stop at its next step boundary, for `reason`, unless a stop was asked already."""
        self._request(None, reason)

    def request_at(self, step: int, reason: StopReason) -> None:
        """Ask every worker to stop at `step` (on a pod, the step the notebook chose for every host), unless a stop was
        asked already."""
        self._request(step, reason)

    def _request(self, step: int | None, reason: StopReason) -> None:
        with self._lock:
            if self.requested:
                return
            if step is not None:
                self._write(_STOP_STEP, step)
            self._write(_REQUESTED, reason.value)  # last: a worker that sees it sees the step too

    @property
    def requested(self) -> bool:
        return self._read(_REQUESTED) != 0

    @property
    def reason(self) -> StopReason | None:
        """Why the stop was asked for (None: it was not)."""
        code = self._read(_REQUESTED)
        return None if code == 0 else StopReason(code)

    @property
    def stop_step(self) -> int | None:
        step = self._read(_STOP_STEP)
        return None if step == _UNSET else step

    def should_stop(self, rank: int, step: int) -> bool:
        """Worker side, at a step boundary: True when this rank must stop now."""
        if rank < self.ranks:
            self._write(_FIRST_RANK + rank, step)
        if not self.requested:
            return False
        with self._lock:
            stop_step = self.stop_step
            if stop_step is None:
                furthest = max([step] + [self._read(_FIRST_RANK + other) for other in range(self.ranks)])
                # The furthest rank may have passed its check for `furthest`
                # before the request came: everyone stops after the next one.
                stop_step = furthest + 1
                self._write(_STOP_STEP, stop_step)
        return step >= stop_step

    def ask_to_save(self, step: int) -> None:
        """Worker side, on the rank that found a save due at `step` (after `should_stop` recorded it): every rank saves
        one past the furthest rank. Asking while an agreed save is still ahead changes nothing."""
        with self._lock:
            pending = self._read(_SAVE_STEP)
            if pending != _UNSET and pending >= step:
                return
            furthest = max([step] + [self._read(_FIRST_RANK + rank) for rank in range(self.ranks)])
            self._write(_SAVE_STEP, furthest + 1)

    def save_due(self, step: int) -> bool:
        """Worker side, at a step boundary: an agreed save falls on this step."""
        return self._read(_SAVE_STEP) == step
