from __future__ import annotations

import os

from tpu_nb.wire.channel import EventReader, open_channel
from tpu_nb.wire.events import Event, Output, Progress, WorkerFinished


def test_events_arrive_whole_and_in_order() -> None:
    reader, writer = open_channel()
    sent = [Output(0, "stdout", f"line {n}\n") for n in range(100)] + [WorkerFinished(0)]
    for event in sent:
        writer.send(event)
    writer.close()
    received = []
    while not reader.at_eof:
        received += reader.read(1)
    assert received == sent


def test_many_forked_writers_never_interleave_frames() -> None:
    reader, writer = open_channel()
    children = []
    for rank in range(4):
        pid = os.fork()
        if pid == 0:
            try:
                for n in range(300):
                    writer.send(Output(rank, "stdout", f"{rank}:{n}:" + "x" * 500))
            finally:
                os._exit(0)
        children.append(pid)
    writer.close()
    received = []
    while not reader.at_eof:
        received += reader.read(1)
    for pid in children:
        os.waitpid(pid, 0)
    assert len(received) == 4 * 300
    for rank in range(4):
        texts = [event.text for event in received if event.rank == rank]
        assert [text.split(":")[1] for text in texts] == [str(n) for n in range(300)]


def read_all(reader: EventReader) -> list[Event]:
    received: list[Event] = []
    while not reader.at_eof:
        received += reader.read(1)
    return received


def test_an_event_too_big_for_one_atomic_write_arrives_in_pieces_that_each_fit() -> None:
    reader, writer = open_channel()
    text = "训练损失" * 3000 + "\n"  # 36 KB of CJK text in one print
    metrics = {f"eval_class_{n}_f1": n / 200 for n in range(200)}  # a Trainer logging per-class scores
    pid = os.fork()
    if pid == 0:  # a worker: the kernel reads while it writes
        try:
            writer.send(Output(0, "stdout", text))
            writer.send(Progress(0, 40, metrics, max_steps=100, phase="eval"))
        finally:
            os._exit(0)
    writer.close()
    received = read_all(reader)
    os.waitpid(pid, 0)
    outputs = [event for event in received if isinstance(event, Output)]
    progress = [event for event in received if isinstance(event, Progress)]
    assert len(outputs) > 1 and "".join(event.text for event in outputs) == text
    assert len(progress) > 1 and all(event.step == 40 and event.phase == "eval" for event in progress)
    assert {name: value for event in progress for name, value in event.metrics.items()} == metrics


def test_read_returns_nothing_when_no_event_arrives() -> None:
    reader, _writer = open_channel()
    assert reader.read(0.01) == []
    assert not reader.at_eof
