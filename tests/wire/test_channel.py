from __future__ import annotations

import os

import pytest

from tpu_nb.wire.channel import MAX_FRAME, open_channel
from tpu_nb.wire.events import Output, WorkerFinished


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


def test_an_event_too_big_for_one_atomic_write_is_refused() -> None:
    _reader, writer = open_channel()
    with pytest.raises(ValueError, match="atomic pipe write"):
        writer.send(Output(0, "stdout", "x" * MAX_FRAME))


def test_read_returns_nothing_when_no_event_arrives() -> None:
    reader, _writer = open_channel()
    assert reader.read(0.01) == []
    assert not reader.at_eof
