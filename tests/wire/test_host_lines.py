"""Events as JSON lines, as pod hosts send them through gcloud or kubectl."""

from __future__ import annotations

import os

from tpu_nb.wire.events import CompileCause, Diagnosis, Heartbeat, Output, Progress
from tpu_nb.wire.host_lines import MARKER, HostEnded, LineWriter, decode, encode
from tpu_nb.wire.results import ExceptionReport

EVENTS = [
    Progress(0, 12, {"loss": 0.5, "learning_rate": 1e-4}, max_steps=100, epoch=0.5, phase="train", samples_per_step=64),
    Heartbeat(
        3,
        12,
        "train",
        4,
        2.5,
        (CompileCause("input shape changed (batch 13 vs 16)", "In [4], line 7: loss = step(batch)", "pad"),),
        (1, 2),
        (3, 4),
    ),
    Diagnosis(1, "host-syncs", "Host syncs", "2 per step", ("In [4], line 9",), "report(loss=...)", 20),
    Output(None, "stderr", 'quotes " and newlines\n'),
    ExceptionReport(None, 4, "ValueError", "bad", ["Traceback", '  File "In [3]", line 2']),
    HostEnded("refused", "host 1 has torch 2.8.0"),
]


def test_every_event_comes_back_equal_with_its_host() -> None:
    for event in EVENTS:
        line = encode(7, event)
        assert line.startswith(MARKER) and line.endswith("\n") and line.count("\n") == 1
        decoded = decode(line)
        assert (decoded.host, decoded.event) == (7, event)


def test_other_lines_and_cut_events_are_plain_text() -> None:
    assert decode("Using ssh batch size of 4.\n").text == "Using ssh batch size of 4.\n"
    cut = encode(0, EVENTS[0])[:40]
    assert decode(cut).event is None and decode(cut).text == cut
    # A prefix a relay adds (kubectl --prefix, a timestamp) is skipped.
    assert decode("[pod/x] " + encode(2, EVENTS[3])).event == EVENTS[3]


def test_a_line_writer_writes_whole_lines() -> None:
    read_fd, write_fd = os.pipe()
    writer = LineWriter(write_fd, host=2)
    writer.send(EVENTS[1])
    writer.close()
    with os.fdopen(read_fd) as pipe:
        [line] = pipe.readlines()
    assert decode(line).event == EVENTS[1] and decode(line).host == 2
