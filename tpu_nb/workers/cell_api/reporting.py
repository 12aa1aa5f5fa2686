"""Progress from a worker's training loop to the kernel, at no cost per step.

`report(...)` is called every step but does almost nothing most of the time:
events go out at most every `REPORT_INTERVAL` seconds, and a report held back
goes anyway when it carries a metric the next one does not (an evaluation
every few steps is never lost to the rate). A loss that is still
a lazy XLA tensor is read in a step closure, after the step's graph has run,
so reporting adds no graph execution and no compilation, only one small
device-to-host copy per interval. On TorchTPU a loss on the chip is copied
to the host without waiting (`DeviceReads`, in `device_readings` with the
compilation readings the heartbeat sends) and sent once the copy is done.
Rank 0's tokens and samples (`report(tokens=, samples=)`, a Trainer's
batches: `step_counts`) go with its reports the same way, read with the loss.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from tpu_nb.wire.events import Counted, Heartbeat, Notice, Progress, Stalled, Stopping
from tpu_nb.wire.stop_reason import StopReason
from tpu_nb.workers.readings.device_readings import CompiledSteps, CompileReading, DeviceReads, xla_compile_reading, xla_compiles_started
from tpu_nb.workers.readings.step_counts import COUNT_KEYS, StepCounts, counted_from
from tpu_nb.workers.stalls.watchdog import Activity

if TYPE_CHECKING:
    from tpu_nb.wire.channel import EventSink
    from tpu_nb.wire.shared_memory_stop import StopRequest
    from tpu_nb.workers.checkpoints.saving import Checkpointer
    from tpu_nb.workers.doctor.probe import Checkup
    from tpu_nb.workers.stalls.watchdog import StepWatchdog

REPORT_INTERVAL = 0.25  # seconds between Progress events: at most 4 a second
HEARTBEAT_INTERVAL = 1.0  # seconds between each rank's Heartbeat


class ProcessDoctor(Protocol):
    """A doctor of a worker process, looked at on each heartbeat: the XLA doctor, or TorchTPU's."""

    def check(self, step: int, own_reads: int, final: bool = False) -> Checkup: ...


class StopTraining(Exception):
    """Raised by `report(...)` when the run was asked to stop gracefully: by the user, its deadline or a search's pruner
    (its message says which: "stopped by its deadline at step 120").

    A hand-written loop ends there; tpu_nb treats it as a normal end, so
    `--return` values and weights come back. Catch it to clean up first.
    """


class WorkerReporter:
    """One per worker process; knows the ranks of the threads in it."""

    def __init__(self, writer: EventSink, stop_request: StopRequest) -> None:
        self.writer = writer
        self.stop_request = stop_request
        self.world_size = 1
        self._ranks = threading.local()
        self._lock = threading.Lock()
        self.steps: dict[int, int | None] = {}
        self._calls: dict[int, int] = {}
        self.phases: dict[int, str] = {}
        self._last_progress = 0.0
        self.unsent: tuple[Progress, dict[str, Any]] | None = None
        self._notices: set[str] = set()
        self.doctor: ProcessDoctor | None = None  # set before the user's code runs, unless the doctor is off
        self.own_reads = 0  # device values tpu_nb itself read (report()'s lazy loss), which the doctor discounts
        self.history: list[tuple[int | None, dict[str, float]]] = []  # what rank 0 sent: a checkpoint keeps the curve
        self.checkpointer: Checkpointer | None = None  # with --checkpoint: this process's checkpoints
        self.watchdog: StepWatchdog | None = None  # set before the user's code runs, unless --watchdog off
        self.ticks: dict[int, int] = {}  # step() calls per rank: an evaluation moves without changing the step
        self.left: set[int] = set()  # ranks whose user code has returned or raised: the watchdog no longer waits for them
        self.read_compiles: Callable[[], CompileReading] = xla_compile_reading  # TorchTPU's workers read their own stack's
        self.device_reads: DeviceReads | None = None  # TorchTPU's: values on the chip, read once copied
        self._sending_copied = threading.Lock()  # the rank's thread and the heartbeat's: reports keep their order
        self._compiling_since: float | None = None  # when the compilation running now started (heartbeat's reading)
        self.compiled = CompiledSteps()
        self.counts = StepCounts()  # rank 0's tokens and samples (only rank 0 sends reports)
        self._heartbeat = threading.Thread(target=self._beat, name="tpu_nb-heartbeat", daemon=True)

    def enter(self, rank: int, world_size: int) -> None:
        """Called by each device's thread before the user's code runs."""
        self._ranks.rank = rank
        self.world_size = world_size
        with self._lock:
            self.steps[rank] = None
            self.phases[rank] = "starting"
            if not self._heartbeat.is_alive():
                self._heartbeat.start()

    def leave(self, rank: int) -> None:
        """Called by a device's thread when the user's code has returned or raised.

        Its compiled steps that no heartbeat carried yet go now, so the run's
        summary judges every step.
        """
        self.left.add(rank)
        while compiled := self.compiled.take(rank):
            compiles = self.read_compiles()
            step = self.steps.get(rank)
            self.writer.send(
                Heartbeat(rank, step, self.phases.get(rank, "train"), compiles.count, compiles.seconds, compiled_steps=compiled)
            )

    @property
    def rank(self) -> int:
        return self._ranks.rank  # type: ignore[no-any-return]

    def step(self, step: int | None, phase: str = "train") -> None:
        """Remember this rank's step and phase for its heartbeat, and whether the step compiled (cheap: no device work)."""
        rank = self.rank
        if step is not None:
            self.steps[rank] = step
            self.compiled.boundary(rank, step, self._compiles_started(), phase == "train")
        self.phases[rank] = phase
        self.ticks[rank] = self.ticks.get(rank, 0) + 1

    def should_stop(self, step: int | None) -> bool:
        """At a step boundary: has a graceful stop reached this rank's step?

        Without a step number, the count of calls on this rank stands in.
        """
        rank = self.rank
        self._calls[rank] = self._calls.get(rank, 0) + 1
        boundary = self._calls[rank] if step is None else step
        if not self.stop_request.should_stop(rank, boundary):
            return False
        self.phases[rank] = "stopping"
        self.writer.send(Stopping(rank, boundary, self.stop_reason))
        return True

    @property
    def stop_reason(self) -> StopReason:
        """Why the graceful stop this rank obeys was asked for (once `should_stop` said so)."""
        reason = self.stop_request.reason
        assert reason is not None, "a stop is asked with its reason"
        return reason

    def due(self) -> bool:
        """True at most every REPORT_INTERVAL; only rank 0 sends metrics."""
        if self.rank != 0:
            return False
        now = time.monotonic()
        if now - self._last_progress < REPORT_INTERVAL:
            return False
        self._last_progress = now
        return True

    def send_progress(self, progress: Progress) -> None:
        if progress.metrics:
            self.history.append((progress.step, dict(progress.metrics)))
        self.writer.send(progress)

    def notice(self, text: str) -> None:
        """Tell the user something once per run (e.g. a default tpu_nb changed)."""
        if text not in self._notices:
            self._notices.add(text)
            self.writer.send(Notice(self.rank, text))

    def flush(self) -> None:
        """Send the last report that the rate limit held back (the run's final step), after those still being copied."""
        self.send_copied(everything=True)
        if self.unsent is not None:
            progress, values = self.unsent
            self.unsent = None
            self.send_now(progress, values)

    def send_now(self, progress: Progress, values: dict[str, Any]) -> None:
        """Send a report with the counts so far, its values read now (the run's end: its last step has run or runs now)."""
        _send_values(self, progress, {**values, **self.counts.values()})

    def dispatch(self, progress: Progress, values: dict[str, Any]) -> None:
        """Send a report with the counts so far; values still on the device go once read, never waited for.

        A lazy XLA tensor is read in a step closure, after the step's graph
        has run; one on a TorchTPU chip once its copy to the host is done.
        """
        values = {**values, **self.counts.values()}
        self.send_copied()
        if self.device_reads is not None and self.device_reads.wants(values):
            self.device_reads.start(progress, values)  # sent once copied: the chip is never waited for
        elif any(_is_lazy_tensor(value) for value in values.values()):
            import torch_xla.core.xla_model as xm

            # Runs after the next step barrier, when the values exist on the device.
            xm.add_step_closure(_send_values, args=(self, progress, values))
        else:
            _send_values(self, progress, values)

    def send_copied(self, everything: bool = False) -> None:
        """Send the reports whose values have reached the host (TorchTPU)."""
        if self.device_reads is None:
            return
        with self._sending_copied:
            for progress, values in self.device_reads.ready(everything):
                _send_values(self, progress, values)

    def _beat(self) -> None:
        while True:
            time.sleep(HEARTBEAT_INTERVAL)
            self.send_copied()  # a loop between reports, or a long last step
            compiles = self.read_compiles()
            count, seconds = compiles.count, compiles.seconds
            compiling = self._compiling(compiles)
            checkup = self._checkup()
            for index, (rank, step) in enumerate(list(self.steps.items())):
                phase = self.phases.get(rank, "train")
                compiled = self.compiled.take(rank)
                if checkup is None:
                    self.writer.send(Heartbeat(rank, step, phase, count, seconds, compiling=compiling, compiled_steps=compiled))
                    continue
                causes = checkup.causes if index == 0 else ()  # one process's compilations, said once
                spent = checkup.spent if rank == checkup.rank else None
                self.writer.send(
                    Heartbeat(rank, step, phase, count, seconds, causes, checkup.memory, checkup.cache, compiling, compiled, spent)
                )
            for diagnosis in checkup.diagnoses if checkup is not None else ():
                self.writer.send(diagnosis)
            for stall in self._watch(compiles):
                self.writer.send(stall)

    def _compiles_started(self) -> int:
        """Compilations started in this process: torch_xla's counter (a host-side read), else the stack's own reading."""
        if self.read_compiles is xla_compile_reading:
            return xla_compiles_started()
        return self.read_compiles().started

    def _compiling(self, compiles: CompileReading) -> float | None:
        """Seconds the compilation running in this process has taken so far (a graceful stop waits for it), if one runs."""
        if compiles.started <= compiles.finished:
            self._compiling_since = None
            return None
        now = time.monotonic()
        self._compiling_since = self._compiling_since or now
        return now - self._compiling_since

    def _watch(self, compiles: CompileReading) -> list[Stalled]:
        """Ranks that stopped moving (the watchdog reads what the heartbeat has read anyway)."""
        watchdog = self.watchdog
        if watchdog is None:
            return []
        # A rank stopping gracefully waits for the others at the stop step: not a stall.
        done = frozenset(self.left) | frozenset(rank for rank, phase in list(self.phases.items()) if phase == "stopping")
        return watchdog.observe(Activity(dict(self.steps), dict(self.ticks), compiles.finished, compiles.started), done)

    def final_checkup(self) -> None:
        """The doctor's last look when the user's code returns, so a short run's findings and causes reach the summary."""
        checkup = self._checkup(final=True)
        if checkup is None:
            return
        # A run shorter than a heartbeat: why its steps compiled goes as a heartbeat would carry it; and where the
        # time went up to the run's end.
        if checkup.causes or checkup.spent is not None:
            rank, compiles = self.rank, self.read_compiles()
            phase = self.phases.get(rank, "train")
            spent = checkup.spent if rank == checkup.rank else None
            step = self.steps.get(rank)
            memory, cache = checkup.memory, checkup.cache
            self.writer.send(Heartbeat(rank, step, phase, compiles.count, compiles.seconds, checkup.causes, memory, cache, spent=spent))
        for diagnosis in checkup.diagnoses:
            self.writer.send(diagnosis)

    def _checkup(self, final: bool = False) -> Checkup | None:
        """The XLA doctor's readings (`final`: the run's end); a failing doctor is turned off with one note, never the heartbeat."""
        doctor = self.doctor
        if doctor is None:
            return None
        steps = max((step if step is not None else self._calls.get(rank, 0) for rank, step in list(self.steps.items())), default=0)
        try:
            return doctor.check(steps, self.own_reads, final)
        except Exception as error:  # noqa: BLE001 - the doctor must never stop the heartbeat that shows liveness
            self.doctor = None
            rank = next(iter(self.steps), 0)
            self.writer.send(Notice(rank, f"the XLA doctor stopped after an error in tpu_nb ({type(error).__name__}: {error})"))
            return None


_reporter: WorkerReporter | None = None


def install(reporter: WorkerReporter | None) -> None:
    """Set this process's reporter; done once in each worker process, before the user's code."""
    global _reporter
    _reporter = reporter


def current() -> WorkerReporter | None:
    return _reporter


def notice(text: str) -> None:
    """Tell the user something once per run, from anywhere in a worker (what a mend or the Trainer's hook changed);
    nothing outside one."""
    if _reporter is not None:
        _reporter.notice(text)


def in_worker() -> bool:
    """True in a tpu_nb worker (inside `%%tpu_train` or `tpu_nb.launch`), False in the notebook."""
    return _reporter is not None


def report(
    step: int | None = None,
    loss: Any = None,
    *,
    max_steps: int | None = None,
    epoch: float | None = None,
    batch_size: int | None = None,
    tokens: Any = None,
    samples: Any = None,
    **metrics: Any,
) -> None:
    """Send a training step's progress to the notebook's live display.

    Call it every step, after the optimizer step: it is rate-limited (a metric reported only every few steps, such as an
    evaluation's, is always sent). It is
    also where a hand-written loop stops gracefully: after an interrupt (or the run's deadline, or a search's pruner) it
    raises `StopTraining` at the step every rank agreed on. `loss` and `metrics` may be
    Python numbers or XLA tensors (read after the step runs, never forcing
    an extra execution). `tokens` and `samples` are this rank's counts in
    this step (tokens that are not padding, e.g. `batch["attention_mask"].sum()`),
    numbers or tensors (summed on the device, read with the loss), for
    tokens/s, samples/s and MFU; `batch_size`, this rank's batch, counts
    samples as `samples` does. Outside a `%%tpu_train` worker it does nothing.
    """
    reporter = _reporter
    if reporter is None:
        return
    # numpy's and torch's scalars (a step from np.arange, a tensor's count) become plain numbers,
    # which every path to the notebook can carry.
    step, max_steps, batch_size = _number(step, int), _number(max_steps, int), _number(batch_size, int)
    epoch = _number(epoch, float)
    reporter.step(step)
    stopping = reporter.should_stop(step)
    values = dict(metrics)
    if loss is not None:
        values["loss"] = loss
    counted = None
    if reporter.rank == 0:
        reporter.counts.add(tokens, batch_size if samples is None else samples)
        counted = Counted(time.monotonic(), None, None)  # this step's end: the counts are filled in when sent
    progress = Progress(reporter.rank, step, {}, max_steps, epoch, "train", counted)
    checkpointer = reporter.checkpointer if reporter.rank == 0 and step is not None else None
    held = reporter.unsent
    if held is not None and not held[1].keys() <= values.keys():
        # It carries a metric this one does not (an evaluation's, every few steps): sent now, not replaced and lost to the
        # rate limit (a search's pruner compares trials at the steps they were evaluated).
        reporter.unsent = None
        reporter.dispatch(*held)
    if stopping:
        reporter.unsent = (progress, values) if reporter.rank == 0 else None
        reporter.flush()
        if checkpointer is not None and step is not None:
            checkpointer.save(step, reporter.history)  # what the run learned, kept before it stops
        raise StopTraining(f"stopped by {reporter.stop_reason.who} at step {progress.step}")
    if checkpointer is not None and step is not None and checkpointer.due(step):
        reporter.unsent = (progress, values)
        reporter.flush()  # this step's metrics read now (the save syncs anyway), so its checkpoint holds them
        checkpointer.save(step, reporter.history)
        return
    if not reporter.due():
        reporter.unsent = (progress, values) if reporter.rank == 0 else None
        return
    reporter.unsent = None
    reporter.dispatch(progress, values)


def _number(value: Any, kind: type[Any]) -> Any:
    """A step, epoch or size as a Python number (a tensor's `.item()`: these few are read at once), None kept."""
    if value is None:
        return None
    return kind(value.item() if hasattr(value, "item") else value)


def _send_values(reporter: WorkerReporter, progress: Progress, values: dict[str, Any]) -> None:
    reporter.own_reads += sum(1 for value in values.values() if _is_lazy_tensor(value))
    read = {name: value.item() if hasattr(value, "item") else value for name, value in values.items()}
    metrics = {name: float(value) for name, value in read.items() if name not in COUNT_KEYS}
    reporter.send_progress(dataclasses.replace(progress, metrics=metrics, counted=_counted(reporter, progress.counted, read)))


def _counted(reporter: WorkerReporter, stamped: Counted | None, read: dict[str, Any]) -> Counted | None:
    """The run's counts at the reported step: rank 0's times the ranks (each feeds a batch of its own); None where none."""
    tokens, samples = counted_from(read)
    if stamped is None or (tokens is None and samples is None):
        return None
    ranks = reporter.world_size
    return Counted(
        stamped.seconds,
        None if tokens is None else tokens * ranks,
        None if samples is None else samples * ranks,
        reporter.counts.flops_per_token,
    )


def _is_lazy_tensor(value: Any) -> bool:
    device = getattr(value, "device", None)
    return getattr(device, "type", None) == "xla"
