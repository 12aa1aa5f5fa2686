from __future__ import annotations

import io

import pytest
from support.clock import FakeClock

from tpu_nb.kernel.progress.state import ProgressState
from tpu_nb.kernel.progress.text import TextProgress
from tpu_nb.kernel.progress.throughput import Basis
from tpu_nb.wire.events import Counted, Heartbeat, Notice, Progress, WorkerStarted


@pytest.fixture
def stream() -> io.StringIO:
    return io.StringIO()


@pytest.fixture
def text(clock: FakeClock, stream: io.StringIO) -> TextProgress:
    return TextProgress(ProgressState("%%tpu_train", "Cloud TPU v4-8", 2, clock=clock), stream=stream, min_interval=5.0)


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def step(text: TextProgress, clock: FakeClock, number: int, compile_count: int = 7, seconds: float = 0.25, compiled: bool = False) -> None:
    clock.advance(seconds)
    text.on_event(Progress(0, number, {"loss": 50 / (number + 1)}, max_steps=500, phase="train"))
    for rank in (0, 1):
        text.on_event(Heartbeat(rank, number, "train", compile_count, 30.0, compiled_steps=((number, number),) if compiled else ()))


def test_status_line_is_rate_limited(text: TextProgress, clock: FakeClock, stream: io.StringIO) -> None:
    for rank in (0, 1):
        text.on_event(WorkerStarted(rank, 2, 100 + rank, f"xla:{rank}"))
    assert lines(stream) == ["compiling 0s | workers 1/2"]  # the first event writes at once

    clock.advance(4.0)
    text.on_event(Heartbeat(0, 0, "train", 1, 3.0))
    assert len(lines(stream)) == 1
    clock.advance(1.0)
    text.on_event(Heartbeat(1, 0, "train", 1, 3.0))
    assert lines(stream)[-1] == "compiling 5s | compilations: 1 | workers 2/2"

    clock.advance(60.0)
    for number in range(1, 121):  # 30 s of steps at 4/s: lines at steps 1, 21, ..., 101
        step(text, clock, number)
    assert len(lines(stream)) == 2 + 6
    assert lines(stream)[-1] == "step 101/500 (20%) | loss 0.4902 | 4.0 steps/s | ETA 1m40s | compilations: 7 | workers 2/2"


def test_recompilation_warning_is_written_once(text: TextProgress, clock: FakeClock, stream: io.StringIO) -> None:
    for number in range(1, 200):
        step(text, clock, number, compile_count=7 if number < 50 else number - 42, compiled=number >= 50)
    warnings = [line for line in lines(stream) if line.startswith("warning:")]
    assert len(warnings) == 1
    assert warnings[0].startswith("warning: XLA compiled again at ") and "first at step 50" in warnings[0]

    text.finish("done")
    assert len([line for line in lines(stream) if line.startswith("warning:")]) == 1


def test_notices_are_written_once(text: TextProgress, clock: FakeClock, stream: io.StringIO) -> None:
    for rank in (0, 1):
        text.on_event(Notice(rank, "Trainer: optim adamw_torch_fused -> adamw_torch"))
    text.finish("done")
    assert lines(stream).count("note: Trainer: optim adamw_torch_fused -> adamw_torch") == 1


def test_final_line(text: TextProgress, clock: FakeClock, stream: io.StringIO) -> None:
    for number in range(1, 41):
        step(text, clock, number)
    clock.advance(1.0)
    text.on_event(Progress(0, 40, {"eval_loss": 0.75, "eval_accuracy": 0.5}, phase="eval"))
    text.finish("interrupted", "KeyboardInterrupt at step 40")

    assert lines(stream)[-2:] == [
        "%%tpu_train interrupted after 11s | step 40/500 (8%) | loss 1.22 | eval_loss 0.75 | eval_accuracy 0.5 | compilations: 7",
        "KeyboardInterrupt at step 40",
    ]


def test_the_lines_say_tokens_per_second_and_mfu_where_counted(clock: FakeClock, stream: io.StringIO) -> None:
    basis = Basis(chips=4, peak=1e6, no_peak=None, flops_per_token=100.0)
    text = TextProgress(ProgressState("%%tpu_train", "Cloud TPU v4-8", 1, clock=clock, basis=basis), stream=stream, min_interval=0.0)
    for number in range(1, 11):  # 2,000 tokens a second
        clock.advance(0.5)
        text.on_event(Progress(0, number, {}, max_steps=10, phase="train", counted=Counted(clock.now, number * 1000, number * 8)))
    assert lines(stream)[-1] == "step 10/10 (100%) | 2.0 steps/s | 2,000 tokens/s | MFU 5.0% | ETA 0s | workers 1/1"
    text.finish("done")
    assert lines(stream)[-1] == "%%tpu_train done after 5s | step 10/10 (100%) | 2,000 tokens/s | MFU 5.0%"


def test_default_stream_is_stderr_at_construction(capsys: pytest.CaptureFixture[str], clock: FakeClock) -> None:
    text = TextProgress(ProgressState("run", "CPU", 1, clock=clock))
    text.finish("done")
    assert capsys.readouterr().err == "run done after 0s\n"


def test_the_watchdog_s_report_is_written_at_once(clock: FakeClock) -> None:
    from tpu_nb.wire.stacks import RankPlace, StackReport

    stream = io.StringIO()
    text = TextProgress(ProgressState("run", "CPU", 1, clock=clock), stream=stream, min_interval=60.0)
    text.on_event(WorkerStarted(0, 1, 100, "xla:0"))
    text.on_event(StackReport("asked", (RankPlace(0, 100, 3, "In [2], line 4: q.get()", "threading.py, line 1, in wait", ()),), "V.", "F."))
    written = stream.getvalue()
    assert (
        "tpu_nb watchdog: V.\n  Fix: F.\n  (asked)\nrank 0 at step 3 (pid 100): In [2], line 4: q.get()\n    waiting in threading.py"
        in written
    )
