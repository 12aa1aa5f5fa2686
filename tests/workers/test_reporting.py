"""The worker's reporter: a failing XLA doctor is turned off with one note, never the heartbeat."""

from __future__ import annotations

from typing import Any

from tpu_nb.wire.events import Notice
from tpu_nb.workers.reporting import WorkerReporter


class RecordingWriter:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send(self, event: Any) -> None:
        self.sent.append(event)


class BrokenDoctor:
    def check(self, step: int, own_reads: int) -> Any:
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
