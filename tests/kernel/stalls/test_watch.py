"""The kernel's StallWatch: a stall's report from real processes, one report per stall, a silent process, a rank that ended."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tpu_nb.kernel.stalls.record import SILENT_EXTRA
from tpu_nb.kernel.stalls.watch import StallWatch
from tpu_nb.wire.events import Heartbeat, Stalled, WorkerFinished, WorkerStarted
from tpu_nb.wire.stacks import StackReport, WatchdogSetting

ARMED = """
import os, sys, threading, time
from pathlib import Path
from tpu_nb.workers.stalls.stack_dumps import arm_stack_dumps
arm_stack_dumps(Path(sys.argv[1]), os.getpid())
def blocked_on_a_queue():
    import queue
    queue.Queue().get()
print(threading.get_ident(), flush=True)
blocked_on_a_queue()
"""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[tuple[int, int]]]:
    """Two real processes blocked on a queue, as (pid, thread id) of their rank's thread."""
    processes = [subprocess.Popen([sys.executable, "-c", ARMED, str(tmp_path)], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        started = [(process.pid, int(process.stdout.readline())) for process in processes if process.stdout is not None]
        time.sleep(0.5)  # from the print to the queue's wait
        yield started
    finally:
        for process in processes:
            process.kill()
            process.wait()


def test_a_stall_gets_one_report_of_every_running_rank(tmp_path: Path, workers: list[tuple[int, int]]) -> None:
    clock = Clock()
    watch = StallWatch(tmp_path, WatchdogSetting(5.0), clock, chips=lambda rank: None if rank else "rank 0: TensorCore 0%")
    for rank, (pid, thread) in enumerate(workers):
        watch.on_event(WorkerStarted(rank, 2, pid, "CPU:0", thread))
        watch.on_event(Heartbeat(rank, 40 + rank, "train", 1, 1.0))
    report = watch.on_stall(Stalled(1, 41, 6.0, 5.0, None))
    assert report is not None
    assert [(place.rank, place.step, place.pid) for place in report.ranks] == [(0, 40, workers[0][0]), (1, 41, workers[1][0])]
    assert all(place.waits_in is not None and place.waits_in.startswith("threading.py") for place in report.ranks)
    assert report.reason == "rank 1's step has not moved for 6s (the watchdog waits 5s; --watchdog sets it)"
    assert "waits on a queue, event or lock" in report.verdict and report.unanswered == ()
    assert report.chips == "rank 0: TensorCore 0%"
    clock.now = 3.0
    assert watch.on_stall(Stalled(0, 40, 6.0, 5.0, None)) is None  # the same stall, seen by rank 0's watchdog
    watch.on_event(WorkerFinished(0))
    asked = watch.report("asked for")
    assert [place.rank for place in asked.ranks] == [1]  # a rank that finished is not asked


def test_a_process_silent_past_the_threshold_is_asked_once(tmp_path: Path, workers: list[tuple[int, int]]) -> None:
    clock = Clock()
    watch = StallWatch(tmp_path, WatchdogSetting(5.0), clock)
    pid, thread = workers[0]
    watch.on_event(WorkerStarted(0, 1, pid, "CPU:0", thread))
    clock.now = 5.0 + SILENT_EXTRA - 1
    assert watch.silent_process() is None
    clock.now = 5.0 + SILENT_EXTRA + 1
    report = watch.silent_process()
    assert report is not None and report.reason.startswith("rank 0 sent nothing for over 15s")
    assert [place.rank for place in report.ranks] == [0]
    assert watch.silent_process() is None  # once per silence
    assert StallWatch(tmp_path, None, clock).silent_process() is None  # --watchdog off


def test_two_asks_at_once_both_get_every_rank(tmp_path: Path, workers: list[tuple[int, int]]) -> None:
    import threading

    watch = StallWatch(tmp_path, WatchdogSetting(5.0))
    for rank, (pid, thread) in enumerate(workers):
        watch.on_event(WorkerStarted(rank, 2, pid, "CPU:0", thread))
    answers: list[StackReport] = []
    askers = [threading.Thread(target=lambda: answers.append(watch.report("asked for"))) for _ in range(2)]
    for asker in askers:
        asker.start()
    for asker in askers:
        asker.join()
    assert [[place.rank for place in answer.ranks] for answer in answers] == [[0, 1], [0, 1]]
    assert all(answer.unanswered == () for answer in answers)
