"""A pod run's stacks: requests to every host, answers in pieces folded at the cells' lines, one report per stall or silence."""

from __future__ import annotations

import time

from tpu_nb.kernel.stalls.pod_stacks import ASK_SECONDS, PodStacks
from tpu_nb.kernel.stalls.record import SILENT_EXTRA
from tpu_nb.wire.events import Heartbeat, Stalled, WorkerFinished, WorkerStarted
from tpu_nb.wire.run_directory import Cell
from tpu_nb.wire.stacks import StackAnswer, WatchdogSetting

CELLS = (
    Cell("In [1]", "%%tpu_prepare", "import time"),
    Cell("In [2]", "%%tpu_train --pod s", "for step in range(9):\n    time.sleep(600)"),
)
THREAD = 0x7F00


def dump(line: int, tpu_nb_frame: bool = True) -> str:
    """faulthandler's text for a rank's thread in cell In [2] (and a heartbeat thread in tpu_nb's copy on the host)."""
    heartbeat = '\nThread 0x0000000000000001 (most recent call first):\n  File "<tpu_nb>/workers/cell_api/reporting.py", line 80 in _beat\n'
    return (
        f"Thread {THREAD:#018x} (most recent call first):\n"
        f'  File "In [2]", line {line} in <module>\n'
        '  File "/usr/lib/python3/dist-packages/torch_xla/_internal/pjrt.py", line 183 in __call__\n'
    ) + (heartbeat if tpu_nb_frame else "")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Hosts:
    """Stands in for the backend: the request numbers delivered, or why delivery failed."""

    def __init__(self, problem: str | None = None) -> None:
        self.asked: list[int] = []
        self.problem = problem

    def __call__(self, number: int) -> str | None:
        self.asked.append(number)
        return self.problem


def started(stacks: PodStacks, hosts: int = 2) -> None:
    for host in range(hosts):
        stacks.on_event(host, WorkerStarted(0, 1, 500 + host, "xla:0", THREAD))
        stacks.on_event(host, Heartbeat(0, 40 if host == 0 else 2, "train", 1, 1.0))


def wait_for(asked: Hosts, count: int) -> None:
    deadline = time.monotonic() + 5
    while len(asked.asked) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(asked.asked) == count


def test_a_stall_asks_every_host_and_reports_once_every_process_answered(tmp_path: object) -> None:
    clock, hosts = Clock(), Hosts()
    stacks = PodStacks(WatchdogSetting(3.0), hosts, CELLS, clock)
    started(stacks)
    request = stacks.on_stall(1, Stalled(0, 2, 4.0, 3.0, None))
    assert request is not None and stacks.on_stall(0, Stalled(0, 40, 4.0, 3.0, None)) is None  # the same stall, another host
    wait_for(hosts, 1)
    text = dump(3)
    stacks.on_event(1, StackAnswer(request.number, 501, text[:50], last=False))  # in pieces, in order
    stacks.on_event(1, StackAnswer(request.number, 501, text[50:]))
    assert stacks.due() == []  # host 0 has not answered yet
    stacks.on_event(0, StackAnswer(request.number, 500, dump(2)))
    [report] = stacks.due()
    assert stacks.due() == []  # said once
    assert report.reason.startswith("on host 1, rank 0's step has not moved for 4s")
    assert report.verdict == "Rank 0 on host 1 (step 2) is sleeping at In [2], line 3: time.sleep(600)."
    assert [(place.host, place.rank, place.step, place.where) for place in report.ranks] == [
        (0, 0, 40, "In [2], line 2: for step in range(9):"),
        (1, 0, 2, "In [2], line 3: time.sleep(600)"),
    ]
    stalled = report.ranks[1]
    assert stalled.stack == ("torch_xla/_internal/pjrt.py, line 183, in __call__", "In [2], line 3: time.sleep(600)")
    assert stalled.other_threads == ()  # the host's tpu_nb threads, known by the mark its copy's paths carry
    assert report.unanswered == ()


def test_a_host_that_does_not_answer_is_said_with_how_to_ask_it_by_hand() -> None:
    clock, hosts = Clock(), Hosts(problem="ssh: connect to host 10.0.0.3 port 22: Connection timed out")
    stacks = PodStacks(WatchdogSetting(3.0), hosts, CELLS, clock)
    started(stacks)
    request = stacks.ask("asked for")
    wait_for(hosts, 1)
    stacks.on_event(0, StackAnswer(request.number, 500, dump(1)))
    stacks.on_event(0, StackAnswer(request.number + 7, 500, dump(1)))  # an answer to no request of this run: ignored
    assert not stacks.ready(request)
    clock.now = ASK_SECONDS + 1
    assert stacks.ready(request) and stacks.due() == []  # the user's own request: its report goes to them, not the dashboard
    report = stacks.report(request)
    assert [place.host for place in report.ranks] == [0]
    silent, undelivered = report.unanswered
    assert silent.startswith("pid 501 on host 1 (rank 0): no answer within 45s") and "kill -USR2 501" in silent
    assert undelivered == "the request did not reach every host (ssh: connect to host 10.0.0.3 port 22: Connection timed out)"
    assert stacks.report(request) is report and request.reported.is_set()


def test_a_process_that_could_not_answer_says_why_and_a_finished_rank_is_not_waited_for() -> None:
    clock, hosts = Clock(), Hosts()
    stacks = PodStacks(WatchdogSetting(3.0), hosts, CELLS, clock)
    started(stacks)
    stacks.on_event(0, WorkerFinished(0))
    request = stacks.ask("asked for")
    assert request.expected == frozenset({(1, 501)})
    stacks.on_event(1, StackAnswer(request.number, 501, "", problem="no answer within 3s (stuck in the kernel of the OS, or ended)"))
    assert stacks.ready(request)
    report = stacks.report(request)
    assert report.ranks == () and report.verdict == "No rank answered with its stack."
    assert report.unanswered == ("pid 501 on host 1 (rank 0): no answer within 3s (stuck in the kernel of the OS, or ended)",)


def test_a_silent_host_is_asked_about_once_per_silence() -> None:
    clock, hosts = Clock(), Hosts()
    stacks = PodStacks(WatchdogSetting(5.0), hosts, CELLS, clock)
    started(stacks)
    clock.now = 5.0 + SILENT_EXTRA - 1
    stacks.on_event(0, Heartbeat(0, 41, "train", 1, 1.0))  # host 0 keeps talking, host 1 does not
    clock.now = 5.0 + SILENT_EXTRA + 1
    request = stacks.on_silence()
    assert request is not None and request.reason.startswith("host 1 sent nothing for over 15s")
    assert stacks.on_silence() is None
    wait_for(hosts, 1)
    for host in (0, 1):
        stacks.on_event(host, StackAnswer(request.number, 500 + host, dump(2)))
    [report] = stacks.due()
    assert report.reason == request.reason
    stacks.on_event(1, Heartbeat(0, 3, "train", 1, 1.0))  # it spoke again: a later silence is a new one
    clock.now += 5.0 + SILENT_EXTRA + 1
    assert stacks.on_silence() is not None
    assert PodStacks(None, hosts, CELLS, clock).on_silence() is None  # --watchdog off


def test_a_host_with_one_rank_done_and_another_at_work_is_still_watched_for_silence() -> None:
    clock, hosts = Clock(), Hosts()
    stacks = PodStacks(WatchdogSetting(5.0), hosts, CELLS, clock)
    for rank in (0, 1):
        stacks.on_event(0, WorkerStarted(rank, 2, 500, "xla:0", THREAD + rank))
        stacks.on_event(0, Heartbeat(rank, 3, "train", 1, 1.0))
    stacks.on_event(0, WorkerFinished(0))
    clock.now = 5.0 + SILENT_EXTRA + 1
    request = stacks.on_silence()
    assert request is not None and request.expected == frozenset({(0, 500)})  # rank 1's process, still at work
