"""What a worker reads from its device stack without waiting on the device: compilations, and values on a chip.

Compilations: torch_xla's metrics and counters (`xla_compile_reading`,
`xla_compiles_started`, host-side reads) or TorchTPU's own statistics, as a
`CompileReading`; the steps at whose boundary the count grew
(`CompiledSteps`), for the heartbeat. Values on a TorchTPU chip are copied
to the host asynchronously and handed over once the copy is done
(`DeviceReads`), so `report()` never waits for the chip.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tpu_nb.wire.events import Progress

MOST_COMPILED_RUNS = 32  # runs of compiled steps one heartbeat carries (the rest wait for the next): one small message


@dataclass(frozen=True, slots=True)
class CompileReading:
    """A process's compilations so far: how many finished and their seconds (the heartbeat), and for the watchdog,
    how many were started and how many finished or came from a cache (a compilation runs while started > finished)."""

    count: int
    seconds: float
    started: int
    finished: int


class DeviceEvent(Protocol):
    """A torch device event, as `torch.tpu.Event` offers it for a copy to the host: recorded after the copy is
    queued, asked without blocking."""

    def record(self) -> None: ...

    def query(self) -> bool: ...


class DeviceReads:
    """Values on a TorchTPU chip, copied to the host without waiting for the chip, and sent once each copy is done.

    torch_tpu copies asynchronously into a contiguous host tensor of the same
    dtype and size; an event recorded after the copies says, without
    blocking, when they are done.
    """

    def __init__(self, device_type: str, make_event: Callable[[], DeviceEvent]) -> None:
        self.device_type = device_type
        self._make_event = make_event
        self._lock = threading.Lock()
        self._pending: deque[tuple[Progress, dict[str, Any], DeviceEvent]] = deque()

    def wants(self, values: dict[str, Any]) -> bool:
        return any(getattr(getattr(value, "device", None), "type", None) == self.device_type for value in values.values())

    def start(self, progress: Progress, values: dict[str, Any]) -> None:
        """Queue the copies of `values`' tensors on the chip, and the event after them."""
        copies = {name: self._host_copy(value) if self.wants({name: value}) else value for name, value in values.items()}
        event = self._make_event()
        event.record()
        with self._lock:
            self._pending.append((progress, copies, event))

    def ready(self, everything: bool = False) -> list[tuple[Progress, dict[str, Any]]]:
        """The reports whose copies are done, in order (`everything`: all of them, the run's end waits for its last)."""
        done = []
        with self._lock:
            while self._pending and (everything or self._pending[0][2].query()):
                progress, copies, _event = self._pending.popleft()
                done.append((progress, copies))
        return done

    @staticmethod
    def _host_copy(value: Any) -> Any:
        import torch

        host = torch.empty(value.shape, dtype=value.dtype, device="cpu")
        host.copy_(value.detach(), non_blocking=True)
        return host


class CompiledSteps:
    """The steps at whose boundary a rank found new compilations, kept as runs of consecutive steps until a heartbeat takes them.

    Each rank reads its process's count of started compilations at every
    step boundary (a host-side counter: no device work); a step compiled
    when the count grew since the rank's previous, earlier step. Only
    training steps count: an evaluation's boundaries (the same step again)
    move the count on, so its graphs are never a step's.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the ranks' threads and the heartbeat's
        self._last: dict[int, tuple[int, int]] = {}  # rank -> (its latest step, the count read there)
        self._runs: dict[int, list[list[int]]] = {}  # rank -> [first, last] runs not yet sent

    def boundary(self, rank: int, step: int, count: int, training: bool) -> None:
        last = self._last.get(rank)
        self._last[rank] = (step if last is None else max(step, last[0]), count)
        # The first boundary only sets the count: what compiled before it is the run's start.
        if last is None or not training or step <= last[0] or count <= last[1]:
            return
        with self._lock:
            runs = self._runs.setdefault(rank, [])
            if runs and runs[-1][1] == step - 1:
                runs[-1][1] = step
            else:
                runs.append([step, step])

    def take(self, rank: int) -> tuple[tuple[int, int], ...]:
        """This rank's compiled steps not yet sent, as (first, last) runs: at most MOST_COMPILED_RUNS."""
        with self._lock:
            runs = self._runs.get(rank)
            if not runs:
                return ()
            taken, self._runs[rank] = runs[:MOST_COMPILED_RUNS], runs[MOST_COMPILED_RUNS:]
            return tuple((first, last) for first, last in taken)


def xla_compile_reading() -> CompileReading:
    """torch_xla's compilations in this process so far (its metrics count one as started before it ends)."""
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    count, seconds = (0, 0.0) if data is None else (int(data[0]), data[1] / 1e9)
    # A persistent cache hit finishes a started compilation without a CompileTime sample.
    return CompileReading(count, seconds, met.counter_value("UncachedCompile") or 0, count + (met.counter_value("PersistentCacheHit") or 0))


def xla_compiles_started() -> int:
    """torch_xla's compilations started in this process (new graphs, persistent cache loads included): one host-side
    counter read (about a microsecond; `metric_data` would copy its samples)."""
    return _xla_counter_value()("UncachedCompile") or 0


@functools.cache
def _xla_counter_value() -> Callable[[str], int | None]:
    import torch_xla

    return torch_xla._XLAC._xla_counter_value  # type: ignore[no-any-return]
