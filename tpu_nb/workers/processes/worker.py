"""Each forked worker: run the program, tell the kernel how it went, hand back the result.

The supervisor sets `PAYLOAD` before `xmp.spawn` forks the workers, so the
payload reaches them through fork, never through pickling.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tpu_nb.wire.channel import EventSink
from tpu_nb.wire.checkpoints import CheckpointPlan
from tpu_nb.wire.events import WorkerFinished, WorkerRaised, WorkerStarted
from tpu_nb.wire.mesh import MeshShape
from tpu_nb.wire.results import ResultPlaces, save_result
from tpu_nb.wire.shared_memory_stop import StopRequest
from tpu_nb.wire.stacks import WatchdogSetting
from tpu_nb.wire.worker_exceptions import ExceptionReport, save_exception
from tpu_nb.workers.cell_api import reporting
from tpu_nb.workers.cell_output.printed_output import capture_output, flush_output, thread_rank
from tpu_nb.workers.cell_output.tracebacks import format_user_traceback
from tpu_nb.workers.checkpoints.saving import Checkpointer
from tpu_nb.workers.doctor.probe import WorkerDoctor, analyse_compilations, start_compile_cache
from tpu_nb.workers.doctor.torch_tpu_doctor import TRACE_DIRECTORY, TorchTpuDoctor
from tpu_nb.workers.mends import mend_libraries_for_xla
from tpu_nb.workers.mends.progress_bars import text_bars
from tpu_nb.workers.processes.chip_ranks import ChipRun, start_rank
from tpu_nb.workers.processes.programs import Program, WorkerContext
from tpu_nb.workers.readings.device_readings import DeviceReads
from tpu_nb.workers.readings.read_back import host_copy, materialise_pending
from tpu_nb.workers.stalls.stack_dumps import arm_stack_dumps
from tpu_nb.workers.stalls.watchdog import StepWatchdog
from tpu_nb.workers.trainer.hook import watch_for_trainer


@dataclass(frozen=True, slots=True)
class WorkerPayload:
    """What the kernel hands its workers (through fork)."""

    program: Program
    writer: EventSink
    stop_request: StopRequest
    places: ResultPlaces  # the exchange directory (results, errors, stacks, the doctor's logs) and where results may spill over
    all_results: bool
    mesh: MeshShape | None  # set for an SPMD run
    doctor: bool = True  # the XLA doctor: compilation analysis, counters, input waits
    compile_cache: str | None = None  # XLA's persistent compilation cache directory
    checkpoints: CheckpointPlan | None = None  # --checkpoint: where and how often, and what to resume from
    watchdog: WatchdogSetting | None = field(default_factory=WatchdogSetting)  # None: --watchdog off
    chips: ChipRun | None = None  # a TorchTPU run: a process per chip (not torch_xla's)


PAYLOAD: WorkerPayload | None = None
_setup_lock = threading.Lock()
_doctor_started = False


def run_worker(index: int) -> None:
    """`xmp.spawn`'s function, one per device: `index` is the global ordinal."""
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    payload = _payload()
    rank, world_size = index, xr.world_size()
    thread_rank.value = rank
    context = WorkerContext(rank, world_size, torch_xla.device(), len(xm.get_xla_supported_devices()))
    _run(payload, context, workers=world_size, device_label=str(context.device))


def run_spmd_worker() -> None:
    """The one worker of an SPMD run: it drives every device of the host through a mesh."""
    import numpy as np
    import torch_xla
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    payload = _payload()
    assert payload.mesh is not None
    # Before any XLA tensor exists in this process: SPMD cannot be turned on later.
    xr.use_spmd()
    devices = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(devices), payload.mesh.sizes, payload.mesh.axes)
    xs.set_global_mesh(mesh)
    thread_rank.value = 0
    context = WorkerContext(0, devices, torch_xla.device(), 1, mesh)
    _run(payload, context, workers=1, device_label=f"{devices} devices, mesh {payload.mesh}")


def run_chip_worker(rank: int) -> None:
    """A TorchTPU rank, in its own process: its chip's environment, the stack, the process group, then the program."""
    payload = _payload()
    assert payload.chips is not None
    capture_output(payload.writer)  # torch_tpu's own words while it starts reach the notebook too
    # The doctor reads torch_tpu's trace in fused mode, where a record is a graph, not an operator.
    traced = payload.doctor and payload.chips.mode == "fused"
    try:
        device = start_rank(payload.chips, rank, payload.places.exchange_dir / TRACE_DIRECTORY if traced else None)
    except Exception as error:  # noqa: BLE001 - torch_tpu refusing to start (its environment, the rendezvous) goes to the kernel
        _say_raised(payload, rank, payload.chips.chips, error)
        return
    thread_rank.value = rank
    context = WorkerContext(rank, payload.chips.chips, device, 1)
    _run(payload, context, workers=payload.chips.chips, device_label=f"{device} (chip {rank}, {payload.chips.mode})")


def _payload() -> WorkerPayload:
    assert PAYLOAD is not None, "tpu_nb's workers run only in processes forked by its supervisor"
    return PAYLOAD


def _run(payload: WorkerPayload, context: WorkerContext, workers: int, device_label: str) -> None:
    """Run the program on this rank, tell the kernel how it went, hand back the result.

    `workers` is how many ranks run the program (one per device, or the one SPMD worker).
    """
    rank = context.rank
    capture_output(payload.writer)
    reporter = _reporter_for(payload, context)
    reporter.enter(rank, workers)
    _prepare_process(payload, reporter, context)
    payload.writer.send(WorkerStarted(rank, workers, os.getpid(), device_label, threading.get_ident()))
    try:
        result = payload.program.run(context)
    except BaseException as error:  # noqa: BLE001 - everything the user's code raises goes to the kernel
        reporter.leave(rank)
        _finish_checkpoints(reporter)  # one being written was of a good step: kept
        _say_raised(payload, rank, workers, error)
        return
    reporter.leave(rank)
    reporter.flush()
    if reporter.checkpointer is not None and rank == 0:
        reporter.checkpointer.save_last(reporter.history)  # a loop that ran to its end: its final state
    _finish_checkpoints(reporter)
    reporter.final_checkup()
    if rank == 0 or payload.all_results:
        materialise_pending()  # one graph for all pending work, before anything is read back
        save_result(result, payload.places, rank, to_host=host_copy)
    flush_output()
    payload.writer.send(WorkerFinished(rank))


def _say_raised(payload: WorkerPayload, rank: int, workers: int, error: BaseException) -> None:
    """Tell the kernel this rank raised: its report (with the traceback) saved for the notebook, then the event."""
    report = ExceptionReport.of(rank, workers, error, format_user_traceback(error))
    save_exception(report, payload.places.exchange_dir)
    flush_output()
    payload.writer.send(WorkerRaised(rank, f"{report.type_name}: {report.message}"[:500]))


def _finish_checkpoints(reporter: reporting.WorkerReporter) -> None:
    """The last checkpoint written and checked before the worker reports its end."""
    if reporter.checkpointer is not None:
        reporter.checkpointer.wait()


def _prepare_process(payload: WorkerPayload, reporter: reporting.WorkerReporter, context: WorkerContext) -> None:
    """Once per process, before the user's code computes anything: stack dumps, the watchdog, progress bars as text,
    other libraries mended for XLA (xla_mends), the compilation cache, the XLA doctor."""
    global _doctor_started
    with _setup_lock:
        if _doctor_started:  # TPU v2/v3: another device thread of this process got here first
            return
        _doctor_started = True
        # Before the user's code: a rank that never reaches a step can still be asked where it is.
        arm_stack_dumps(payload.places.exchange_dir, os.getpid())
        if payload.watchdog is not None:
            reporter.watchdog = StepWatchdog(payload.watchdog)
        text_bars()
        if payload.chips is not None:
            stack = payload.chips.stack
            reporter.read_compiles = stack.read_compiles
            reporter.device_reads = DeviceReads(context.device.type, stack.make_event)
            if payload.doctor:
                trace = os.environ.get("TORCH_TRACE")  # set by start_rank in fused mode, or by the user
                reporter.doctor = TorchTpuDoctor(context.rank, stack.read_compiles, Path(trace) if trace else None)
            return  # the XLA compilation cache and doctor are torch_xla's
        mend_libraries_for_xla()
        cache_on = False
        if payload.compile_cache is not None:
            note = start_compile_cache(payload.compile_cache, context.rank)
            if note is not None:
                reporter.notice(note)
            cache_on = note is None
        if payload.doctor:
            analysis = analyse_compilations(payload.places.exchange_dir, context.rank)
            reporter.doctor = WorkerDoctor(context.rank, context.device, analysis, cache_on)


def _reporter_for(payload: WorkerPayload, context: WorkerContext) -> reporting.WorkerReporter:
    """This process's progress reporter (and checkpoints), created (with the Trainer hook) by its first device thread."""
    with _setup_lock:
        reporter = reporting.current()
        if reporter is None:
            reporter = reporting.WorkerReporter(payload.writer, payload.stop_request)
            reporting.install(reporter)
            if payload.checkpoints is not None:
                world = {"world_size": context.world_size, "mesh": None if payload.mesh is None else str(payload.mesh)}
                reporter.checkpointer = Checkpointer(payload.checkpoints, payload.writer, world)
            watch_for_trainer(spmd=payload.mesh is not None, xla=payload.chips is None)
        return reporter
