"""The doctor on TorchTPU: compilations after warm-up, why each batch ran and where, from torch_tpu's own readings.

torch_tpu counts its compilations (`torch.tpu._get_cache_stats`, through
`read_compiles`) and, with TORCH_TRACE set before it loads, traces every
batch it compiled: why the batch ran (`item()`, `.cpu()`, ...) and the line
of the user's code of its ops. Read at each heartbeat; nothing here touches
the device. A step that compiles again after warm-up is said once, with the
places and reasons, and the fix. Not run on a TPU here: the trace's format is
torch 2.14.1's and torch_tpu 0.2.0's, the statistics are a private API.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from tpu_nb.wire.events import CompileCause, Diagnosis
from tpu_nb.workers.doctor.analysis_log import Frame
from tpu_nb.workers.doctor.findings import MOST_PLACES, WARMUP_STEPS
from tpu_nb.workers.doctor.places import describe
from tpu_nb.workers.doctor.probe import Checkup
from tpu_nb.workers.doctor.torch_tpu_readings import CacheMiss, TraceFollower
from tpu_nb.workers.readings.device_readings import CompileReading

TRACE_DIRECTORY = "torch-tpu-trace"
RECOMPILING = "torch-tpu-recompiling"
_READS_A_VALUE = {"item()": "a value read with .item()", ".cpu()": "a tensor moved with .cpu()", "synchronize()": "a synchronize()"}
_FIX = (
    "Keep the step's shapes and control flow the same every step: pad or bucket batches (DataLoader(drop_last=True) for the "
    "last one), and read values (.item(), .cpu(), print) every N steps, outside the step, or through report(loss=...): in "
    "fused mode each read ends the graph and a changed shape compiles a new one."
)


class TorchTpuDoctor:
    """One per TorchTPU worker process: its compilations, and the trace's reasons and places for them."""

    def __init__(self, rank: int, read_compiles: Callable[[], CompileReading], trace_dir: Path | None) -> None:
        self._rank = rank
        self._read_compiles = read_compiles
        self._trace = TraceFollower(trace_dir) if trace_dir is not None else None
        self._lock = threading.Lock()  # the heartbeat thread and the rank's final check-up
        self._at_warm_up_end: int | None = None  # compilations when warm-up ended
        self._late: list[CacheMiss] = []  # misses traced after warm-up
        self._said = False

    def check(self, step: int, own_reads: int, final: bool = False) -> Checkup:
        """The doctor's look at this moment (`own_reads` is the XLA doctor's; torch_tpu's trace counts reads itself)."""
        with self._lock:
            compiled = self._read_compiles().count
            # Warm-up's end takes every record so far (the last one too), so none of warm-up's counts as late.
            warm_up_ends = self._at_warm_up_end is None and step >= WARMUP_STEPS
            misses = self._trace.new_misses(to_the_end=final or warm_up_ends) if self._trace is not None else ()
            if step < WARMUP_STEPS:
                return Checkup((), (), None, None)
            if self._at_warm_up_end is None:
                self._at_warm_up_end = compiled
                misses = ()  # warm-up's own compilations
            self._late += misses
            causes = tuple(_cause(miss) for miss in misses[:3])
            diagnoses: tuple[Diagnosis, ...] = ()
            recompiled = compiled - self._at_warm_up_end if compiled else len(self._late)
            if recompiled > 0 and not self._said:
                self._said = True
                diagnoses = (self._diagnosis(step, recompiled),)
            return Checkup(causes, diagnoses, None, None)

    def _diagnosis(self, step: int, recompiled: int) -> Diagnosis:
        reasons = Counter(_reason(miss) for miss in self._late)
        why = "; ".join(f"{count} after {reason}" for reason, count in reasons.most_common(3))
        places = tuple(dict.fromkeys(place for miss in self._late if (place := _place(miss)) is not None))[:MOST_PLACES]
        evidence = f"{recompiled} graph(s) compiled after warm-up (step {WARMUP_STEPS}), by step {step}" + (f": {why}" if why else "")
        return Diagnosis(self._rank, RECOMPILING, "Compiling again after warm-up", evidence, places, _FIX, step)


def _reason(miss: CacheMiss) -> str:
    return _READS_A_VALUE.get(miss.reason, miss.reason)


def _place(miss: CacheMiss) -> str | None:
    """ "In [4], line 7: loss = model(x)" from the trace's "file:line" (a cell's file named as the notebook names it)."""
    if miss.place is None or ":" not in miss.place:
        return None
    filename, line = miss.place.rsplit(":", 1)
    return describe(Frame("", filename, int(line))) if line.isdecimal() else None


def _cause(miss: CacheMiss) -> CompileCause:
    failed = " (its compilation failed)" if miss.compile_failed else ""
    return CompileCause(f"a new graph ran at {_reason(miss)}{failed}", _place(miss), _FIX)
