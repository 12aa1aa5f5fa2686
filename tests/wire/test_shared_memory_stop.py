from __future__ import annotations

import os

from tpu_nb.wire.shared_memory_stop import StopRequest


def test_nothing_stops_until_a_stop_is_requested() -> None:
    control = StopRequest(ranks=2)
    assert not control.should_stop(0, 5)
    assert control.stop_step is None


def test_every_rank_stops_after_the_step_past_the_furthest_one() -> None:
    control = StopRequest(ranks=2)
    control.should_stop(0, 7)
    control.should_stop(1, 8)  # rank 1 is one step ahead
    control.request()
    assert not control.should_stop(0, 8)
    assert control.stop_step == 9
    assert control.should_stop(1, 9)
    assert control.should_stop(0, 9)


def test_the_request_reaches_a_forked_worker() -> None:
    control = StopRequest(ranks=1)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        step = 0
        while not control.should_stop(0, step):
            step += 1
        os.write(write_fd, str(step).encode())
        os._exit(0)
    control.request()
    os.waitpid(pid, 0)
    stopped_at = int(os.read(read_fd, 100))
    assert stopped_at == control.stop_step


def test_a_stop_at_a_given_step_is_that_step_for_every_rank() -> None:
    control = StopRequest(ranks=2)
    control.should_stop(0, 3)
    control.request_at(12)  # a pod: the notebook chose the step for every host
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
