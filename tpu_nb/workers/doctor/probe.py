"""The XLA doctor's glue in a worker: set up before XLA starts, read at each heartbeat.

Everything here runs once per worker or on the heartbeat thread (about once
a second): reading counters, a log file and the training thread's CPU clock
adds no graph execution and no host transfer to the training step.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_nb.wire.events import CompileCause, Diagnosis, TimeSpent
from tpu_nb.workers.doctor.analysis_log import AnalysisLog
from tpu_nb.workers.doctor.findings import Findings, Reading
from tpu_nb.workers.doctor.host_reads import HostReadWatch
from tpu_nb.workers.doctor.input_watch import InputWatch
from tpu_nb.workers.doctor.transfers import TransferWatch
from tpu_nb.workers.doctor.trl_padding import TrlPadding

_HOST_READ_COUNTER = "aten::_local_scalar_dense"
_EXECUTION_COUNTERS = ("ExecuteComputation", "ExecuteReplicated")

CPU_CACHE_NOTE = (
    "compile cache skipped: XLA:CPU cannot load the programs it caches (they fail to deserialize); --compile-cache takes effect on TPU."
)


def analyse_compilations(exchange_dir: Path, rank: int) -> Path | None:
    """Ask torch_xla to explain every compilation into a file of this rank's (before its first compilation).

    torch_xla reads PT_XLA_DEBUG_LEVEL when it first compiles, so setting it
    here, after the fork, is in time. A user who set it or PT_XLA_DEBUG_FILE
    keeps their settings, and the doctor goes without the analysis.
    """
    if "PT_XLA_DEBUG_LEVEL" in os.environ or "PT_XLA_DEBUG_FILE" in os.environ:
        return None
    path = exchange_dir / f"xla-analysis-rank{rank}.txt"
    os.environ["PT_XLA_DEBUG_LEVEL"] = "1"
    os.environ["PT_XLA_DEBUG_FILE"] = str(path)
    return path


def start_compile_cache(directory: str, rank: int) -> str | None:
    """Turn on XLA's persistent compilation cache in `directory`/rank<N>; a note for the user if it cannot be."""
    import torch_xla.runtime as xr

    if xr.device_type() == "CPU":
        return CPU_CACHE_NOTE
    path = Path(directory).expanduser() / f"rank{rank}"
    path.mkdir(parents=True, exist_ok=True)
    xr.initialize_cache(str(path), readonly=False)
    return None


@dataclass(frozen=True, slots=True)
class Checkup:
    """What the heartbeat sends: causes of recent compilations, diagnoses, memory and cache figures, and where the
    doctor's rank's time went (`spent`, on that rank's heartbeat)."""

    causes: tuple[CompileCause, ...]
    diagnoses: tuple[Diagnosis, ...]
    memory: tuple[int, int] | None
    cache: tuple[int, int] | None
    rank: int = 0
    spent: TimeSpent | None = None


class WorkerDoctor:
    """One per worker process: watches its inputs and reads XLA's counters at each heartbeat.

    Made in the thread of its rank (the process's first), whose scheduling it
    reads (Linux's schedstat: the time the thread ran, and waited for a core
    to run on): that time outside its waits for batches is the host's work
    on the steps (tracing, Python); the rest of its time it waited for the
    device. Where schedstat is missing, the thread's CPU clock stands in.
    """

    def __init__(self, rank: int, device: Any, analysis: Path | None, cache_on: bool) -> None:
        self._rank = rank
        self._findings = Findings(rank)
        self._schedstat = f"/proc/self/task/{threading.get_native_id()}/schedstat"
        self._thread_clock: int | None = time.pthread_getcpuclockid(threading.get_ident())
        self._log = AnalysisLog(analysis) if analysis is not None else None
        self._device = device
        self._memory_readable = True
        self._cache_on = cache_on
        self._lock = threading.Lock()  # the heartbeat thread and the rank's final check-up
        self.inputs = InputWatch()
        self.inputs.install()
        self.reads = HostReadWatch()
        self.reads.install()
        self.transfers = TransferWatch()
        self.transfers.install()
        # The worker's start, before the user's code: a run no heartbeat saw past warm-up is judged from here.
        self._findings.examine(self._read(0, 0))

    def padded_by(self, padding: TrlPadding) -> None:
        """The run's Trainer is TRL's and pads its batches so: a changing shape's fix names its config's line."""
        with self._lock:
            self._findings.padding = padding

    def check(self, step: int, own_reads: int, final: bool = False) -> Checkup:
        """The doctor's look at this moment; `final` when the user's code has returned."""
        with self._lock:
            return self._check(step, own_reads, final)

    def _check(self, step: int, own_reads: int, final: bool) -> Checkup:
        import torch_xla.debug.metrics as met

        reading = self._read(step, own_reads)
        examination = self._findings.examine(reading, final)
        cache = None
        if self._cache_on:
            cache = (met.counter_value("PersistentCacheHit") or 0, met.counter_value("PersistentCacheMiss") or 0)
        spent = None if reading.host is None else TimeSpent(reading.seconds, reading.step, reading.input_wait, reading.host)
        return Checkup(examination.causes, examination.diagnoses, self._memory(), cache, self._rank, spent)

    def _read(self, step: int, own_reads: int) -> Reading:
        import torch_xla.debug.metrics as met

        names = met.counter_names()
        counts = {name: met.counter_value(name) or 0 for name in names if name.startswith("aten::")}
        waited, loading, shapes = self.inputs.seen(self._rank)
        busy = self._thread_busy()
        return Reading(
            step=step,
            seconds=time.monotonic(),
            executions=sum(met.counter_value(name) or 0 for name in _EXECUTION_COUNTERS if name in names),
            host_reads=counts.pop(_HOST_READ_COUNTER, 0),
            own_reads=own_reads + self.reads.library_reads,
            fallbacks=counts,
            input_wait=waited,
            compilations=tuple(self._log.read_new()) if self._log is not None else (),
            shapes=shapes,
            read_places=self.reads.places(),
            transfers=self.transfers.sites(),
            host=None if busy is None else max(busy - loading, 0.0),
        )

    def _thread_busy(self) -> float | None:
        """Seconds the rank's thread has run or waited for a core so far (else its CPU seconds); None once it has ended."""
        try:
            with open(self._schedstat, "rb") as stat:
                ran, waited = stat.read().split()[:2]
            return (int(ran) + int(waited)) / 1e9
        except (OSError, ValueError):  # no schedstat (a kernel without it), or the thread has ended
            pass
        if self._thread_clock is None:
            return None
        try:
            return time.clock_gettime(self._thread_clock)
        except OSError:  # EINVAL: the thread has ended
            self._thread_clock = None
            return None

    def _memory(self) -> tuple[int, int] | None:
        """(bytes used, bytes limit) of this worker's device; None where the device does not say (XLA:CPU)."""
        if not self._memory_readable:
            return None
        import torch_xla.core.xla_model as xm

        try:
            info = xm.get_memory_info(self._device)
        except RuntimeError:  # "UNIMPLEMENTED: GetAllocatorStats is not supported" (XLA:CPU)
            self._memory_readable = False
            return None
        return int(info["bytes_used"]), int(info["bytes_limit"])
