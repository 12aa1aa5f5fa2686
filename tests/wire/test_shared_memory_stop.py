from __future__ import annotations

import os
import time
from collections.abc import Callable

from tpu_nb.wire.shared_memory_stop import StopRequest
from tpu_nb.wire.stop_reason import StopReason


def test_nothing_stops_until_a_stop_is_requested() -> None:
    control = StopRequest(ranks=2)
    assert not control.should_stop(0, 5)
    assert control.stop_step is None


def test_every_rank_stops_after_the_step_past_the_furthest_one() -> None:
    control = StopRequest(ranks=2)
    control.should_stop(0, 7)
    control.should_stop(1, 8)  # rank 1 is one step ahead
    control.request(StopReason.USER)
    assert not control.should_stop(0, 8)
    assert control.stop_step == 9
    assert control.should_stop(1, 9)
    assert control.should_stop(0, 9)


def stopped_in_a_fork(control: StopRequest, ask: Callable[[], None]) -> tuple[int, int]:
    """A forked worker steps until the stop `ask` requests reaches it (10 s at most): the step it stopped at, and the
    reason's code it read (0: none)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:  # the child never returns into pytest, whatever it raises
            step, give_up = 0, time.monotonic() + 10  # a parent that failed to ask leaves no child spinning
            while not control.should_stop(0, step) and time.monotonic() < give_up:
                step += 1
            reason = control.reason
            os.write(write_fd, f"{step} {0 if reason is None else reason.value}".encode())
        finally:
            os._exit(0)
    try:
        ask()
    finally:
        os.waitpid(pid, 0)
    step, code = os.read(read_fd, 100).split()
    return int(step), int(code)


def test_the_request_reaches_a_forked_worker() -> None:
    control = StopRequest(ranks=1)
    stopped_at, _ = stopped_in_a_fork(control, lambda: control.request(StopReason.USER))
    assert stopped_at == control.stop_step


def test_a_stop_at_a_given_step_is_that_step_for_every_rank() -> None:
    control = StopRequest(ranks=2)
    control.should_stop(0, 3)
    control.request_at(12, StopReason.USER)  # a pod: the notebook chose the step for every host
    assert not control.should_stop(0, 4)
    assert not control.should_stop(1, 11)
    assert control.stop_step == 12
    assert control.should_stop(0, 12) and control.should_stop(1, 12)


def test_a_save_asked_by_one_rank_falls_on_one_step_for_every_rank() -> None:
    request = StopRequest(2)
    assert not request.should_stop(0, 4) and not request.should_stop(1, 5)  # rank 1 is a step ahead
    request.ask_to_save(4)  # rank 0's clock says a save is due
    assert [request.save_due(step) for step in (4, 5, 6)] == [False, False, True]  # one past the furthest rank
    request.ask_to_save(5)  # asked again before the agreed step: nothing changes
    assert request.save_due(6)
    assert not request.should_stop(0, 6) and not request.should_stop(1, 7)
    request.ask_to_save(7)  # the next one, once the agreed step has passed
    assert request.save_due(8) and not request.save_due(6)
    assert not request.requested  # a save is no stop


def test_the_stop_carries_its_reason_to_a_forked_worker() -> None:
    control = StopRequest(ranks=1)
    assert control.reason is None  # nothing asked yet
    _, code = stopped_in_a_fork(control, lambda: control.request(StopReason.DEADLINE))
    assert StopReason(code) is StopReason.DEADLINE  # what the worker read is what the kernel asked


def test_the_first_stop_wins_over_a_later_one() -> None:
    control = StopRequest(ranks=1)
    control.request(StopReason.PRUNED)
    control.request(StopReason.USER)  # an interrupt after the pruner's stop
    control.request_at(40, StopReason.DEADLINE)
    assert control.reason is StopReason.PRUNED
    assert control.stop_step is None  # the later stop's step did not replace the first's either
    assert not control.should_stop(0, 3) and control.stop_step == 4  # one past the furthest rank, as the first stop asked


def test_a_pod_hosts_stop_at_a_given_step_keeps_its_reason() -> None:
    control = StopRequest(ranks=1)
    control.request_at(12, StopReason.DEADLINE)
    assert (control.stop_step, control.reason) == (12, StopReason.DEADLINE)
