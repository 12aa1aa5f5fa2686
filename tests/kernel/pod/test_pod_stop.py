"""The step a pod run's graceful stop asks every host to stop at."""

from __future__ import annotations

from tpu_nb.kernel.pod.pod_stop import STOP_AHEAD_SECONDS, stop_step


def test_no_step_seen_yet_lets_each_host_stop_one_past_its_furthest_rank() -> None:
    assert stop_step([], [], started_at=0.0, now=5.0) is None


def test_the_stop_is_ahead_by_the_steps_that_run_while_it_travels() -> None:
    # host 0: 2 steps a second; last heard at t=10 at step 20; asked at t=11.
    steps = [(5.0, 10), (10.0, 20)]
    expected = 20 + int(2 * (1.0 + STOP_AHEAD_SECONDS)) + 1
    assert stop_step(steps, [], started_at=0.0, now=11.0) == expected


def test_a_host_further_ahead_than_host_0_is_where_the_stop_counts_from() -> None:
    steps = [(5.0, 10), (10.0, 20)]
    assert stop_step(steps, [(10.0, 30)], started_at=0.0, now=10.0) == 30 + 2 * int(STOP_AHEAD_SECONDS) + 1


def test_with_one_report_the_rate_since_the_start_is_doubled_to_stay_ahead() -> None:
    # One report, at t=4 of step 1 (compiling took most of it): 2 steps in 4 s, doubled: 1 step a second.
    assert stop_step([(4.0, 1)], [], started_at=0.0, now=4.0) == 1 + int(STOP_AHEAD_SECONDS) + 1
