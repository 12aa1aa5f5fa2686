"""How long each rank's training thread waits for its next batch (and the CPU it spends meanwhile), and the batches' shapes.

Installed in each worker (a throwaway fork, so wrapping the data loaders'
`__next__` touches no one else's state). Four clock readings per batch: the
wall clock and the thread's CPU clock, before and after. The CPU a thread
spends loading its own batches (a DataLoader without workers) is input,
not the host's work on the step (`probe` tells them apart).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tpu_nb.workers.cell_output.printed_output import thread_rank

Shapes = tuple[tuple[int, ...], ...]
_MOST_TENSORS = 32
_MOST_SHAPES = 16


class InputWatch:
    """Seconds each rank's thread spent waiting in a data loader (and of those, on its CPU), and the batch shapes seen."""

    def __init__(self) -> None:
        self._waits: dict[int, tuple[float, float]] = {}  # rank -> (seconds waited, CPU seconds spent meanwhile)
        self.shapes: dict[Shapes, None] = {}  # distinct batch shapes, in the order first seen
        self._lock = threading.Lock()

    def install(self) -> None:
        """Wrap torch's DataLoader iterators, and the queue MpDeviceLoader's threads fill ahead of the step.

        Not MpDeviceLoader's `__next__`: it also cuts the step's graph
        (torch_xla.sync()), which is compute, not waiting for data.
        """
        from torch.utils.data import dataloader
        from torch_xla.distributed import parallel_loader

        dataloader._BaseDataLoaderIter.__next__ = self._timed(dataloader._BaseDataLoaderIter.__next__)  # type: ignore[method-assign]
        parallel_loader.ParallelLoader.next_item = self._timed(parallel_loader.ParallelLoader.next_item)

    def _timed(self, next_batch: Callable[..., Any]) -> Callable[..., Any]:
        watch = self

        def timed_next(*args: Any) -> Any:
            started, cpu = time.perf_counter(), time.thread_time()
            batch = next_batch(*args)
            rank = getattr(thread_rank, "value", None)
            if rank is not None:  # a rank's training thread, not a loader thread
                waited, spent = time.perf_counter() - started, time.thread_time() - cpu
                with watch._lock:
                    total, on_cpu = watch._waits.get(rank, (0.0, 0.0))
                    watch._waits[rank] = (total + waited, on_cpu + spent)
            watch._saw(batch)
            return batch

        return timed_next

    def _saw(self, batch: Any) -> None:
        shapes = shapes_of(batch)
        if shapes and shapes not in self.shapes:
            with self._lock:
                if len(self.shapes) >= _MOST_SHAPES:
                    del self.shapes[next(reversed(self.shapes))]  # keep the first, make room for the newest
                self.shapes[shapes] = None

    def seen(self, rank: int) -> tuple[float, float, tuple[Shapes, ...]]:
        """`rank`'s seconds waited so far and its CPU seconds meanwhile, and the distinct batch shapes (read from another thread)."""
        with self._lock:
            waited, on_cpu = self._waits.get(rank, (0.0, 0.0))
            return waited, on_cpu, tuple(self.shapes)


def shapes_of(batch: Any) -> Shapes:
    """The shapes of the tensors at the top level of a batch (a tensor, a tuple/list, a dict)."""
    if isinstance(batch, dict):
        values = list(batch.values())
    elif isinstance(batch, (tuple, list)):
        values = list(batch)
    else:
        values = [batch]
    return tuple(tuple(value.shape) for value in values[:_MOST_TENSORS] if hasattr(value, "shape"))
