"""How long a graceful stop waits: learned from the run's events, at the durations a TPU step really has."""

from __future__ import annotations

import pytest

from tpu_nb.basics.units import format_duration
from tpu_nb.kernel.run.stop_wait import MARGIN, PHASE_CEILING, PHASE_FIRST, PHASE_MARGIN, PHASE_SLACK, StopClock
from tpu_nb.wire.checkpoints import CheckpointPlan, Every
from tpu_nb.wire.events import CheckpointSaved, Heartbeat, Progress, WorkerStarted


def heartbeat(rank: int, step: int | None, phase: str = "train", compiling: float | None = None) -> Heartbeat:
    return Heartbeat(rank, step, phase, compile_count=3, compile_seconds=1.0, compiling=compiling)


def saved(step: int, stall: float, seconds: float) -> CheckpointSaved:
    return CheckpointSaved(0, step, f"/c/checkpoint-{step}", seconds, stall, 1000, True, None, 0)


def test_before_any_step_was_timed_a_stop_waits_its_grace() -> None:
    clock = StopClock(grace=5.0)
    wait = clock.wait(requested_at=100.0, now=100.0)
    assert wait.seconds == 5.0 and wait.until == 105.0 and wait.step_seconds is None
    assert wait.text(5.0) == "stopping at the next step boundary every worker reaches: within 5s; interrupt again to stop at once."


def test_before_two_steps_the_time_to_the_first_stands_for_a_step() -> None:
    clock = StopClock(grace=5.0)
    clock.on_event(WorkerStarted(0, 1, 1234, "xla:0"), 10.0)  # the workers start...
    clock.on_event(Progress(0, 1, {"loss": 1.0}), 40.0)  # ...and rank 0's first step ends 30 s later (imports, compiling)
    wait = clock.wait(requested_at=41.0, now=41.0)  # a deadline's stop during the second step, which takes 7 s
    assert clock.longest_step == 30.0 and wait.seconds == MARGIN * 2 * 30.0
    clock.on_event(Progress(0, 2, {"loss": 1.0}), 47.0)
    assert clock.longest_step == 7.0  # once a step is timed, it counts


def test_eight_second_steps_are_waited_for_two_steps_and_a_margin() -> None:
    clock = StopClock(grace=5.0)
    for step, at in ((1, 10.0), (2, 18.0), (3, 26.5), (4, 34.0)):  # rank 0's reports
        clock.on_event(Progress(0, step, {"loss": 1.0}), at)
    clock.on_event(Progress(1, 9, {}), 35.0)  # another rank's step says nothing of rank 0's pace
    assert clock.longest_step == 8.5 and clock.last_step == 4
    wait = clock.wait(requested_at=36.0, now=36.0)
    assert wait.seconds == MARGIN * 2 * 8.5 and wait.until == 36.0 + 25.5
    assert wait.text(5.0) == (
        "stopping at the next step boundary every worker reaches after step 4: a step takes about 8.5s, "
        "so within about 26s; interrupt again to stop at once."
    )


def test_steps_heard_only_in_heartbeats_count_per_step() -> None:
    clock = StopClock(grace=5.0)
    clock.on_event(heartbeat(0, 10), 1.0)
    clock.on_event(heartbeat(0, 40), 2.0)  # 30 fast steps between two heartbeats
    clock.on_event(heartbeat(0, 40, "eval"), 3.0)  # an evaluation's heartbeats are no steps
    assert clock.longest_step is not None and abs(clock.longest_step - 1 / 30) < 1e-9
    assert clock.wait(0.0, 3.5).seconds == 5.0  # quick steps: the grace is the floor


def test_a_compilation_or_an_evaluation_in_progress_is_waited_for_as_it_runs() -> None:
    clock = StopClock(grace=5.0)
    clock.on_event(Progress(0, 1, {}), 0.0)
    clock.on_event(Progress(0, 2, {}), 1.0)
    clock.on_event(heartbeat(1, 2, compiling=40.0), 100.0)  # rank 1 compiles a new graph
    wait = clock.wait(requested_at=60.0, now=100.5)
    assert wait.busy == "compiling (for 40s)" and wait.since == 100.5 and wait.until > 100.5
    assert "a rank is compiling (for 40s), waited for up to 15m00s from its start; then up to 5s for the step boundary" in wait.text(5.0)
    clock.on_event(heartbeat(1, 2), 101.0)  # compiled: the wait counts again from the last busy heartbeat
    wait = clock.wait(requested_at=60.0, now=102.0)
    assert wait.busy is None and wait.since == 100.0 and wait.until == 105.0
    clock.on_event(heartbeat(0, 2, "eval"), 200.0)
    assert clock.wait(60.0, 202.0).busy == "evaluating"
    # A rank that went silent is not waited for as busy: its last heartbeat grows stale.
    assert clock.wait(60.0, 210.0).busy is None and clock.wait(60.0, 210.0).until == 205.0


def test_a_save_due_within_the_wait_is_added_and_the_deadline_learns_the_whole_save() -> None:
    every_ten = CheckpointPlan("/c", every=Every(steps=10), keep=2)
    clock = StopClock(grace=1.0, checkpoints=every_ten)
    clock.on_event(Progress(0, 7, {}), 0.0)
    clock.on_event(Progress(0, 8, {}), 2.0)
    clock.on_event(saved(5, stall=3.0, seconds=20.0), 2.5)
    assert clock.longest_save == 3.0 and clock.longest_save_written == 20.0
    assert clock.wait(3.0, 3.0).seconds == MARGIN * (2 * 2.0 + 3.0)  # step 8 done: 9 and 10 come, 10 saves
    clock.on_event(Progress(0, 10, {}), 6.0)
    assert clock.wait(7.0, 7.0).seconds == MARGIN * 2 * 2.0  # 11 and 12: no save due
    by_time = StopClock(grace=1.0, checkpoints=CheckpointPlan("/c", every=Every(seconds=60.0), keep=2))
    by_time.on_event(Progress(0, 1, {}), 0.0)
    by_time.on_event(Progress(0, 2, {}), 10.0)
    by_time.on_event(saved(2, stall=4.0, seconds=9.0), 10.0)
    assert by_time.wait(20.0, 20.0).seconds == MARGIN * 2 * 10.0  # 10 s since the save + 20 s of steps < 60 s
    assert by_time.wait(55.0, 55.0).seconds == MARGIN * (2 * 10.0 + 4.0)  # the next save falls within the wait


def test_warm_up_steps_that_compiled_stand_for_a_step_only_until_later_ones_are_timed() -> None:
    clock = StopClock(grace=1.0)
    for step, at in ((1, 0.0), (2, 12.0), (3, 12.5)):  # step 2 compiled for 12 s
        clock.on_event(Progress(0, step, {}), at)
    assert clock.longest_step == 12.0  # nothing else known yet
    for step, at in ((6, 14.0), (7, 14.5), (8, 15.2)):
        clock.on_event(Progress(0, step, {}), at)
    assert clock.longest_step is not None and abs(clock.longest_step - 0.7) < 1e-9  # a deadline need not keep 12 s per step
    assert clock.planned(16.0) == MARGIN * 2 * clock.longest_step  # a deadline plans by the steps after warm-up
    warming = StopClock(grace=1.0)
    warming.on_event(Progress(0, 1, {}), 0.0)
    warming.on_event(Progress(0, 2, {}), 12.0)
    assert warming.planned(13.0) is None and warming.wait(13.0, 13.0).seconds == MARGIN * 2 * 12.0  # the stop still waits


def hard_stop_time(clock: StopClock, requested_at: float, rank_says: str, from_second: int, seconds: int = 7200) -> float | None:
    """When a stop asked at `requested_at` ends the run hard while rank 1 says `rank_says` every second from `from_second` on."""
    for second in range(from_second, from_second + seconds):
        clock.on_event(heartbeat(1, 2, rank_says), float(second))
        now = second + 0.5
        if now >= requested_at and now > clock.wait(requested_at, now).until:
            return now
    return None


def test_an_evaluation_that_never_ends_is_waited_for_a_bounded_time_from_its_start_then_the_stop_is_hard() -> None:
    clock = StopClock(grace=5.0)
    clock.on_event(Progress(0, 1, {}), 0.0)
    clock.on_event(Progress(0, 2, {}), 1.0)  # one-second steps: the step boundary is waited for the grace, 5 s
    # The first evaluation of the run, hung: waited for PHASE_FIRST from its start, then the step boundary's wait.
    ended = hard_stop_time(clock, requested_at=200.0, rank_says="eval", from_second=100)
    assert ended is not None and 100 + PHASE_FIRST + 5.0 <= ended <= 100 + PHASE_FIRST + 6.0
    wait = clock.wait(200.0, 300.0)
    assert wait.busy == "evaluating" and wait.text(5.0).startswith(
        "stopping at the next step boundary every worker reaches after step 2: a rank is evaluating, "
        f"waited for up to {format_duration(PHASE_FIRST)} from its start; then up to 5s for the step boundary"
    )


def test_an_evaluation_is_waited_for_twice_as_long_as_the_longest_one_before_it_and_never_past_the_ceiling() -> None:
    clock = StopClock(grace=5.0)
    clock.on_event(Progress(0, 1, {}), 0.0)
    clock.on_event(Progress(0, 2, {}), 1.0)
    for second in range(10, 40):  # an evaluation heard for 30 s...
        clock.on_event(heartbeat(1, 2, "eval"), float(second))
    clock.on_event(heartbeat(1, 2), 40.0)  # ...and over
    ended = hard_stop_time(clock, requested_at=100.0, rank_says="eval", from_second=100)  # the next one hangs
    assert ended is not None and ended == pytest.approx(100 + PHASE_MARGIN * 30 + PHASE_SLACK + 5.0, abs=1.0)
    slow = StopClock(grace=5.0)
    for second in range(0, 3 * 3600, 60):  # an evaluation of three hours (heard once a minute here)...
        slow.on_event(heartbeat(1, 2, "eval"), float(second))
    slow.on_event(heartbeat(1, 2), 3 * 3600.0)
    ended = hard_stop_time(slow, requested_at=20_000.0, rank_says="eval", from_second=20_000, seconds=10 * 3600)
    assert ended is not None and ended == pytest.approx(20_000 + PHASE_CEILING + 5.0, abs=1.0)  # not six hours


def test_a_compilation_counts_from_when_it_began_as_its_heartbeat_says() -> None:
    clock = StopClock(grace=5.0)
    clock.on_event(heartbeat(1, 2, compiling=PHASE_FIRST + 100.0), 2000.0)  # compiling since long before the stop
    wait = clock.wait(requested_at=2000.0, now=2000.5)
    assert (
        wait.busy is not None and wait.busy.startswith("compiling") and wait.until == 2000.0 + 5.0
    )  # past its bound: the grace, then hard
