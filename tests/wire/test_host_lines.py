"""Events as JSON lines, as pod hosts send them through gcloud or kubectl."""

from __future__ import annotations

import os
from pathlib import Path

from tpu_nb.wire.events import CompileCause, Counted, Diagnosis, Heartbeat, Output, Progress, Stopping, TimeSpent
from tpu_nb.wire.host_lines import MARKER, HostEnded, LineWriter, decode, encode
from tpu_nb.wire.stacks import StackAnswer
from tpu_nb.wire.stop_reason import StopReason
from tpu_nb.wire.worker_exceptions import ExceptionReport

EVENTS = [
    Progress(0, 12, {"loss": 0.5, "learning_rate": 1e-4}, 100, 0.5, "train", Counted(8123.5, 24_576, 768, 1.2e9)),
    Progress(0, 13, {}, phase="train", counted=Counted(8124.0, None, 800)),  # samples counted, no tokens
    Heartbeat(
        3,
        12,
        "train",
        4,
        2.5,
        (CompileCause("input shape changed (batch 13 vs 16)", "In [4], line 7: loss = step(batch)", "pad"),),
        (1, 2),
        (3, 4),
        compiled_steps=((6, 9), (12, 12)),  # the steps that compiled, as runs
        spent=TimeSpent(8123.9, 12, 0.25, 3),  # a whole number of seconds where a float is expected
    ),
    Diagnosis(1, "host-syncs", "Host syncs", "2 per step", ("In [4], line 9",), "report(loss=...)", 20),
    Output(None, "stderr", 'quotes " and newlines\n'),
    Stopping(2, 40, StopReason.DEADLINE),  # the reason the host's workers obeyed, as its code
    ExceptionReport(None, 4, "ValueError", "bad", ["Traceback", '  File "In [3]", line 2']),
    HostEnded("refused", "host 1 has torch 2.8.0"),
    StackAnswer(3, 4242, 'Thread 0x01 (most recent call first):\n  File "In [2]", line 9 in <module>\n', last=False),
    StackAnswer(3, 4243, "", problem="the process has exited"),
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
    # Only a line that starts with the marker is an event: a subprocess's raw write that contains it is text.
    quoted = "[pod/x] " + encode(2, EVENTS[3])
    assert decode(quoted).event is None and decode(quoted).text == quoted and not decode(quoted).malformed


def test_a_line_writer_writes_whole_lines() -> None:
    read_fd, write_fd = os.pipe()
    writer = LineWriter(write_fd, host=2)
    writer.send(EVENTS[1])
    writer.close()
    with os.fdopen(read_fd) as pipe:
        [line] = pipe.readlines()
    assert decode(line).event == EVENTS[1] and decode(line).host == 2


MALFORMED = [
    '{"host":Infinity,"origin":"","type":"Output","fields":{"rank":0,"stream":"stdout","text":"x"}}',
    '{"host":-1,"origin":"","type":"Output","fields":{"rank":0,"stream":"stdout","text":"x"}}',
    '{"host":1e400,"origin":"","type":"Output","fields":{"rank":0,"stream":"stdout","text":"x"}}',
    '{"host":0,"origin":"","type":"Heartbeat","fields":{"rank":0,"step":3,"phase":"train","compile_count":1,'
    '"compile_seconds":0.5,"causes":[],"memory":[1],"cache":null}}',
    '{"host":0,"origin":"","type":"Heartbeat","fields":{"rank":0,"step":"3","phase":"train","compile_count":1,"compile_seconds":0.5}}',
    '{"host":0,"origin":"","type":"Progress","fields":{"rank":0,"step":1,"metrics":{"loss":"low"}}}',
    '{"host":0,"origin":"","type":"Progress","fields":{"rank":0,"step":1,"surprise":2}}',
    '{"host":0,"origin":"","type":"Diagnosis","fields":{"rank":0,"key":"k","title":"t","evidence":"e","places":"In [3]","fix":"f","step":null}}',
    '{"host":0,"origin":"","type":"WorkerStarted","fields":{"rank":true,"world_size":1,"pid":2,"device":"xla:0"}}',
    '{"host":0,"origin":"","type":"Stopping","fields":{"rank":0,"step":3,"reason":9}}',  # no such reason
    '{"host":0,"origin":"","type":"Stopping","fields":{"rank":0,"step":3,"reason":true}}',
    '{"host":0,"origin":"","type":"NoSuchEvent","fields":{}}',
    '{"host":0,"origin":"","type":"HostEnded","fields":[]}',
    '{"host":0,"origin":5,"type":"HostEnded","fields":{"status":"done"}}',
    '{"host":0,"type":"HostEnded","fields":{"status":"finished"}}',  # not one of a host's ends
    "not json at all",
    "[1, 2, 3]",
]


def test_a_line_that_only_looks_like_an_event_is_malformed_text_never_an_error() -> None:
    for record in MALFORMED:
        line = MARKER + record + "\n"
        decoded = decode(line)
        assert (decoded.event, decoded.host, decoded.text, decoded.malformed) == (None, None, line, True), record


def test_numbers_of_every_kind_cross_as_json() -> None:
    import numpy as np
    import torch

    progress = Progress(0, np.int64(12), {"loss": np.float32(0.25), "lr": torch.tensor(1e-3).item()}, max_steps=np.int32(100))  # type: ignore[arg-type]
    decoded = decode(encode(0, progress))
    assert decoded.event == Progress(0, 12, {"loss": 0.25, "lr": torch.tensor(1e-3).item()}, max_steps=100)
    nan = decode(encode(0, Progress(0, 1, {"loss": float("nan"), "grad_norm": float("inf")})))
    assert isinstance(nan.event, Progress) and nan.event.metrics["grad_norm"] == float("inf") and nan.event.metrics["loss"] != 0.0


def test_text_in_any_script_keeps_lines_within_one_atomic_write(tmp_path: Path) -> None:
    import select

    stdout = tmp_path / "stdout"
    writer = LineWriter(os.open(stdout, os.O_WRONLY | os.O_CREAT), host=1)
    text = "损失下降 🚀 " * 2000 + '\x01"quoted"\n'
    writer.send(Output(0, "stdout", text))
    writer.send(Progress(0, 3, {f"eval_class_{n}_recall": n / 10 for n in range(200)}))
    writer.close()
    lines = stdout.read_bytes().splitlines(keepends=True)
    assert all(len(line) <= select.PIPE_BUF for line in lines)
    events = [decode(line.decode()).event for line in lines]
    assert "".join(event.text for event in events if isinstance(event, Output)) == text
    assert sum(len(event.metrics) for event in events if isinstance(event, Progress)) == 200


def test_an_exception_report_line_is_capped() -> None:
    try:
        raise RuntimeError("x" * 20_000_000)
    except RuntimeError as error:
        report = ExceptionReport.of(0, 1, error, ["  line"] * 100_000)
    line = encode(0, report)
    assert len(line.encode()) < 1 << 20
    decoded = decode(line).event
    assert (
        isinstance(decoded, ExceptionReport) and "bytes skipped" in decoded.message and "lines skipped" in "".join(decoded.traceback_lines)
    )
