"""The worker's reporter: a failing XLA doctor is turned off with one note, never the heartbeat; any number type reported."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tpu_nb.wire.events import Heartbeat, Notice, Progress, Stopping
from tpu_nb.wire.shared_memory_stop import StopRequest
from tpu_nb.wire.stop_reason import StopReason
from tpu_nb.workers.cell_api import reporting
from tpu_nb.workers.cell_api.reporting import WorkerReporter
from tpu_nb.workers.readings.device_readings import CompileReading, DeviceReads


class RecordingWriter:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, event: Any) -> None:
        self.sent.append(event)


def no_compilations() -> CompileReading:
    """A stack that compiled nothing: these tests also run in TorchTPU's environment, which has no torch_xla to read."""
    return CompileReading(0, 0.0, 0, 0)


class BrokenDoctor:
    def check(self, step: int, own_reads: int, final: bool = False) -> Any:
        raise KeyError("aten::something")


def test_a_doctor_that_raises_is_turned_off_with_one_note() -> None:
    writer = RecordingWriter()
    reporter = WorkerReporter(writer, stop_request=None)  # type: ignore[arg-type]
    reporter.steps[0] = 12
    reporter.doctor = BrokenDoctor()  # type: ignore[assignment]

    reporter.final_checkup()
    reporter.final_checkup()

    assert reporter.doctor is None
    assert writer.sent == [Notice(0, "the XLA doctor stopped after an error in tpu_nb (KeyError: 'aten::something')")]


def test_numpy_and_torch_scalars_are_reported_as_plain_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reporting, "HEARTBEAT_INTERVAL", 3600)  # no heartbeat: it would read XLA's metrics in this process
    writer = RecordingWriter()
    reporter = WorkerReporter(writer, StopRequest(1))
    reporter.read_compiles = no_compilations
    reporter.enter(0, 1)
    reporting.install(reporter)
    try:
        reporting.report(step=np.int64(7), loss=np.float32(0.5), max_steps=torch.tensor(10), epoch=np.float64(0.25), batch_size=np.int32(4))
    finally:
        reporting.install(None)
    [progress] = [event for event in writer.sent if isinstance(event, Progress)]
    assert progress.counted is not None and (progress.counted.tokens, progress.counted.samples) == (None, 4)
    assert progress == Progress(0, 7, {"loss": 0.5}, max_steps=10, epoch=0.25, phase="train", counted=progress.counted)
    assert [type(value) for value in (progress.step, progress.max_steps, progress.epoch)] == [int, int, float]
    assert reporter.steps[0] == 7 and type(reporter.steps[0]) is int


def test_a_loss_on_a_torch_tpu_chip_is_sent_once_its_copy_is_done_never_waiting_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from support.torch_tpu_stand_in import StandInEvent

    monkeypatch.setattr(reporting, "HEARTBEAT_INTERVAL", 3600)  # the test says when copies are looked at
    events: list[StandInEvent] = []

    def make_event() -> StandInEvent:
        events.append(StandInEvent())
        return events[-1]

    writer = RecordingWriter()
    reporter = WorkerReporter(writer, StopRequest(1))
    reporter.device_reads = DeviceReads("cpu", make_event)  # the stand-in's chip is the CPU
    reporter.read_compiles = no_compilations  # a TorchTPU worker reads its own stack's compilations (worker.py)
    reporter.enter(0, 1)
    reporting.install(reporter)
    try:
        loss = torch.tensor(0.75)
        reporting.report(step=1, loss=loss, accuracy=0.5)
        assert [event for event in writer.sent if isinstance(event, Progress)] == []  # copied, not yet done: not waited for
        [event] = events
        assert event.recorded and event.queries == 0
        reporter.send_copied()  # the first query: not done yet
        assert writer.sent == []
        loss.fill_(9.0)  # the step goes on with the tensor: the report holds the value it had
        reporter.send_copied()
        assert writer.sent == [Progress(0, 1, {"accuracy": 0.5, "loss": 0.75}, phase="train")]
        reporting.report(step=2, loss=torch.tensor(0.5))  # rate-limited: held back, read when the run ends
        reporter.flush()
    finally:
        reporting.install(None)
    assert [event.step for event in writer.sent if isinstance(event, Progress)] == [1, 2]


def test_compiled_steps_no_heartbeat_carried_go_when_the_rank_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run shorter than a heartbeat: its summary still judges every step."""
    monkeypatch.setattr(reporting, "HEARTBEAT_INTERVAL", 3600)
    writer = RecordingWriter()
    reporter = WorkerReporter(writer, StopRequest(1))
    started = iter(range(100))
    reporter.read_compiles = lambda: CompileReading(3, 1.5, next(started), 0)  # a stack's own reading: one per call
    reporter.enter(0, 1)
    reporting.install(reporter)
    try:
        for step in range(1, 4):
            reporting.report(step=step, loss=1.0)
    finally:
        reporting.install(None)
    reporter.leave(0)
    [heartbeat] = [event for event in writer.sent if isinstance(event, Heartbeat)]
    assert (heartbeat.rank, heartbeat.step, heartbeat.compiled_steps) == (0, 3, ((2, 3),))


def test_a_metric_reported_between_sends_is_not_dropped_by_the_rate_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop reports its loss every step and an evaluation every few: the evaluation's values all reach the kernel (a
    search's pruner compares trials at the steps they were evaluated), while the loss keeps its rate."""
    monkeypatch.setattr(reporting, "HEARTBEAT_INTERVAL", 3600)
    writer = RecordingWriter()
    reporter = WorkerReporter(writer, StopRequest(1))
    reporter.read_compiles = no_compilations
    reporter.enter(0, 1)
    reporting.install(reporter)
    try:
        for step in range(40):  # far faster than REPORT_INTERVAL: one send for the loss, the rest held or replaced
            evaluation = {"eval_loss": 1.0 / (step + 1)} if step % 10 == 5 else {}
            reporting.report(step=step, loss=float(step), **evaluation)
    finally:
        reporting.install(None)
    sent = [event for event in writer.sent if isinstance(event, Progress)]
    assert [(event.step, event.metrics["eval_loss"]) for event in sent if "eval_loss" in event.metrics] == [
        (step, 1.0 / (step + 1)) for step in (5, 15, 25, 35)
    ]
    assert len(sent) <= 6  # the first loss and the four evaluations (and at most one more): not a send per step


@pytest.mark.parametrize(
    ("reason", "words"), [(StopReason.DEADLINE, "its deadline"), (StopReason.USER, "the user"), (StopReason.PRUNED, "its pruner")]
)
def test_a_stopped_loop_is_told_the_reason_its_stop_was_asked_for(monkeypatch: pytest.MonkeyPatch, reason: StopReason, words: str) -> None:
    """The worker's line (StopTraining's message) and its Stopping event say who asked the stop, not always the user."""
    monkeypatch.setattr(reporting, "HEARTBEAT_INTERVAL", 3600)
    writer, stop = RecordingWriter(), StopRequest(1)
    reporter = WorkerReporter(writer, stop)
    reporter.read_compiles = no_compilations
    reporter.enter(0, 1)
    reporting.install(reporter)
    try:
        reporting.report(step=4, loss=1.0)
        stop.request(reason)
        reporting.report(step=5, loss=1.0)  # the first to see the stop: it stops one past the furthest step, 5
        with pytest.raises(reporting.StopTraining, match=f"^stopped by {words} at step 6$"):
            reporting.report(step=6, loss=1.0)
    finally:
        reporting.install(None)
    assert [event for event in writer.sent if isinstance(event, Stopping)] == [Stopping(0, 6, reason)]
