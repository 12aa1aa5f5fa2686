"""The worker's watchdog: a still rank is said once after its threshold and what moves it."""

from __future__ import annotations

from tpu_nb.wire.stacks import MIN_THRESHOLD, WatchdogSetting
from tpu_nb.workers.stalls.watchdog import Activity, StepWatchdog


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def activity(steps: dict[int, int | None], calls: dict[int, int] | None = None, finished: int = 1, started: int = 1) -> Activity:
    return Activity(steps, calls or {rank: step or 0 for rank, step in steps.items()}, finished, started)


def test_a_rank_still_for_longer_than_a_fixed_threshold_is_said_once_and_again_after_it_moved() -> None:
    clock = Clock()
    watchdog = StepWatchdog(WatchdogSetting(10.0), clock)
    watchdog.observe(activity({0: 1, 1: 1}))
    for second in range(1, 10):
        clock.now = second
        assert watchdog.observe(activity({0: 1 + second, 1: 1})) == []
    clock.now = 10.5
    [stall] = watchdog.observe(activity({0: 11, 1: 1}))
    assert (stall.rank, stall.step, stall.threshold, stall.compiling) == (1, 1, 10.0, None)
    assert stall.seconds == 10.5
    clock.now = 20
    assert watchdog.observe(activity({0: 12, 1: 1})) == []  # said once per stall
    clock.now = 21
    assert watchdog.observe(activity({0: 13, 1: 2})) == []  # rank 1 moved
    clock.now = 31.5
    assert [stall.rank for stall in watchdog.observe(activity({0: 13, 1: 2}))] == [0, 1]


def test_the_learned_threshold_is_five_median_steps_but_never_under_a_minute() -> None:
    clock = Clock()
    watchdog = StepWatchdog(WatchdogSetting(), clock)
    assert watchdog.threshold == MIN_THRESHOLD
    for second in range(0, 20):
        clock.now = second
        watchdog.observe(activity({0: 1 + 4 * second}))  # 4 steps a second
    assert watchdog.threshold == MIN_THRESHOLD
    slow = StepWatchdog(WatchdogSetting(), clock)
    for step in range(10):
        clock.now = 100 + 30.0 * step
        slow.observe(activity({0: step}))
    assert slow.threshold == 150.0  # 5 x 30 s
    clock.now += 149
    assert slow.observe(activity({0: 9})) == []
    clock.now += 2
    assert [stall.rank for stall in slow.observe(activity({0: 9}))] == [0]


def test_calls_without_a_new_step_finished_compilations_and_finished_ranks_count_as_moving() -> None:
    clock = Clock()
    watchdog = StepWatchdog(WatchdogSetting(5.0), clock)
    watchdog.observe(activity({0: 3}, {0: 1}, finished=1))
    for second in range(1, 30):
        clock.now = second
        # An evaluation: the step stays, calls go on; then compilations finish one after another.
        calls = {0: 1 + second} if second < 15 else {0: 15}
        assert watchdog.observe(activity({0: 3}, calls, finished=second if second >= 15 else 1, started=second)) == []
    clock.now = 100
    assert watchdog.observe(activity({0: 3}, {0: 15}, finished=29, started=29), done=frozenset({0})) == []


def test_a_compilation_still_running_is_measured_in_the_stall() -> None:
    clock = Clock()
    watchdog = StepWatchdog(WatchdogSetting(5.0), clock)
    watchdog.observe(activity({0: 1}, finished=1, started=1))
    clock.now = 1
    watchdog.observe(activity({0: 1}, finished=1, started=2))  # a compilation started
    clock.now = 6
    [stall] = watchdog.observe(activity({0: 1}, finished=1, started=2))
    assert stall.compiling == 5.0
