"""The watchdog's record of a run: where ranks run and their steps, silences said once, a stall said once, done ranks left out."""

from __future__ import annotations

from tpu_nb.kernel.stalls.record import SILENT_EXTRA, Silence, StallRecord, of_ranks, ranks_text
from tpu_nb.wire.events import Heartbeat, Output, Progress, Stalled, WorkerFinished, WorkerRaised, WorkerStarted
from tpu_nb.wire.host_lines import HostEvent
from tpu_nb.wire.stacks import MIN_THRESHOLD, WatchdogSetting

FIVE_SECONDS = WatchdogSetting(5.0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def number(value: int) -> int:
    """A local run's key of a rank or a process: its number."""
    return value


def local(setting: WatchdogSetting | None = FIVE_SECONDS) -> tuple[StallRecord[int, int], Clock]:
    """A local run's record: every worker process (its pid) is its own source, ranks keyed by their number."""
    clock = Clock()
    return StallRecord(setting, number, clock), clock


def pod() -> tuple[StallRecord[int, tuple[int, int]], Clock]:
    """A pod run's record: every host is a source, its ranks and processes keyed (host, number)."""
    clock = Clock()
    return StallRecord(FIVE_SECONDS, lambda process: process[0], clock), clock


def on_pod(record: StallRecord[int, tuple[int, int]], host: int, *events: HostEvent) -> None:
    """What a host sent, as a pod run keeps it: the host heard, its ranks and processes keyed (host, number)."""
    for event in events:
        record.heard(host)
        record.follow(event, lambda value: (host, value))


def test_a_source_is_said_silent_past_the_threshold_once_per_silence() -> None:
    record, clock = local()
    record.follow(WorkerStarted(0, 1, 100, "CPU:0", 7), number)
    record.heard(100)
    clock.now = 5.0 + SILENT_EXTRA
    assert record.silent() is None  # not over the threshold yet
    clock.now = 5.0 + SILENT_EXTRA + 1
    assert record.silent() == Silence((100,), 5.0 + SILENT_EXTRA)
    assert record.silent() is None  # said already
    record.heard(100)  # it spoke again: a later silence is a new one
    clock.now += 5.0 + SILENT_EXTRA - 1
    assert record.silent() is None
    clock.now += 2
    assert record.silent() == Silence((100,), 5.0 + SILENT_EXTRA)


def test_the_silence_waits_for_the_learned_threshold_and_not_at_all_without_the_watchdog() -> None:
    learned, clock = local(WatchdogSetting())
    off, _ = local(None)
    for record in (learned, off):
        record.follow(WorkerStarted(0, 1, 100, "CPU:0", 7), number)
        record.heard(100)
    clock.now = MIN_THRESHOLD + SILENT_EXTRA - 1
    assert learned.silent() is None
    clock.now = MIN_THRESHOLD + SILENT_EXTRA + 1
    assert learned.silent() == Silence((100,), MIN_THRESHOLD + SILENT_EXTRA)
    assert off.silent() is None


def test_only_sources_with_a_rank_at_work_are_said_silent() -> None:
    record, clock = pod()
    on_pod(record, 0, WorkerStarted(0, 2, 500, "xla:0", 1), WorkerStarted(1, 2, 501, "xla:1", 2), WorkerFinished(0))
    on_pod(record, 1, WorkerStarted(0, 2, 500, "xla:0", 1), WorkerFinished(0))
    record.heard(2)  # a host that started no rank (it sent a plain line)
    clock.now = 5.0 + SILENT_EXTRA + 1
    silence = record.silent()
    assert silence is not None and silence.sources == (0,)  # host 0's rank 1 is at work; host 1's only rank is done


def test_a_stall_is_said_once_within_its_threshold_counted_from_when_it_was_said() -> None:
    record, clock = local()
    assert record.new_stall(5.0)
    clock.now = 4.0
    assert not record.new_stall(5.0)  # the same stall, seen by another rank's watchdog
    clock.now = 5.0
    assert record.new_stall(5.0)
    clock.now = 30.0
    assert not record.new_stall(60.0)


def test_running_leaves_out_processes_whose_ranks_are_all_done() -> None:
    record, _ = local()
    for rank, pid, thread in ((0, 100, 7), (1, 100, 8), (2, 101, 9), (3, 102, 10)):
        record.follow(WorkerStarted(rank, 4, pid, "CPU:0", thread), number)
    record.follow(WorkerFinished(0), number)
    record.follow(WorkerRaised(2, "ValueError: no"), number)
    assert record.running() == {100: {7: 0, 8: 1}, 102: {10: 3}}  # a process with one rank at work is asked for all of them
    assert record.process_of(3) == 102 and record.process_of(9) is None
    assert record.ranks_in(101) == {9: 2} and record.ranks_in(999) == {}


def test_steps_are_the_last_heard_and_a_stepless_event_keeps_them() -> None:
    record, _ = local()
    record.follow(WorkerStarted(0, 2, 100, "CPU:0", 7), number)
    record.follow(WorkerStarted(1, 2, 101, "CPU:1", 8), number)
    assert record.steps() == {0: None, 1: None}
    record.follow(Heartbeat(0, 3, "train", 1, 1.0), number)
    record.follow(Progress(1, 5), number)
    record.follow(Stalled(0, 4, 6.0, 5.0, None), number)
    record.follow(Heartbeat(1, None, "train", 1, 1.0), number)
    record.follow(Output(1, "stdout", "hello\n"), number)
    assert record.steps() == {0: 4, 1: 5}
    record.follow(WorkerStarted(0, 2, 100, "CPU:0", 7), number)  # said again: its step stays
    assert record.steps() == {0: 4, 1: 5}


def test_on_a_pod_every_host_has_its_own_ranks_and_processes() -> None:
    record, _ = pod()
    for host in (0, 1):
        on_pod(record, host, WorkerStarted(0, 1, 500, "xla:0", 1), Heartbeat(0, 10 + host, "train", 1, 1.0))
    on_pod(record, 1, WorkerFinished(0))
    assert record.steps() == {(0, 0): 10, (1, 0): 11}
    assert record.running() == {(0, 500): {1: (0, 0)}}
    assert record.process_of((1, 0)) == (1, 500)


def test_ranks_are_listed_in_order_and_a_process_without_known_ranks_names_none() -> None:
    assert ranks_text([3, 0, 12]) == "0, 3, 12"
    assert of_ranks({7001: 1, 7000: 0}) == " (rank 0, 1)"  # by thread id: the ranks a worker process runs
    assert of_ranks({}) == ""
