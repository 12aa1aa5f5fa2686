"""The worker's reporter: a failing XLA doctor is turned off with one note, never the heartbeat; any number type reported."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from tpu_nb.wire.events import Notice, Progress
from tpu_nb.wire.stop_request import StopRequest
from tpu_nb.workers import reporting
from tpu_nb.workers.reporting import WorkerReporter


class RecordingWriter:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, event: Any) -> None:
        self.sent.append(event)


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
    reporter.enter(0, 1)
    reporting.install(reporter)
    try:
        reporting.report(step=np.int64(7), loss=np.float32(0.5), max_steps=torch.tensor(10), epoch=np.float64(0.25), batch_size=np.int32(4))
    finally:
        reporting.install(None)
    [progress] = [event for event in writer.sent if isinstance(event, Progress)]
    assert progress == Progress(0, 7, {"loss": 0.5}, max_steps=10, epoch=0.25, phase="train", samples_per_step=4)
    assert [type(value) for value in (progress.step, progress.max_steps, progress.epoch)] == [int, int, float]
    assert reporter.steps[0] == 7 and type(reporter.steps[0]) is int
