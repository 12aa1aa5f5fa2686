"""The one life cycle of every run: a failure, a kill, the timeout, the stop's grace period, a second interrupt.

A scripted run stands in for the processes (local and pod runs are tested
with real ones in test_local_run.py and pod/test_pod_run.py): this checks
the policy alone, without waiting for processes.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest

from tpu_nb.kernel.endings.run_ending import Ending
from tpu_nb.kernel.planning.deadlines import Deadline
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.run.followed_run import FollowedRun, run_in_foreground
from tpu_nb.kernel.run.stop_wait import PHASE_MARGIN, PHASE_SLACK
from tpu_nb.wire.events import Event, Heartbeat, Notice, Progress
from tpu_nb.wire.stacks import StackReport
from tpu_nb.wire.stop_reason import StopReason


class ScriptedRun(FollowedRun):
    """A run whose processes do what the test says."""

    def __init__(self, options: LaunchOptions, reaches_stop: bool = True, stop_takes: float = 0.0) -> None:
        super().__init__(options, "scripted", observers=[self])
        self.reaches_stop = reaches_stop
        self.stop_takes = stop_takes  # seconds from the stop's request to its step boundary
        self.stop_asked_at: float | None = None
        self.delivered: list[Event] = []
        self.failed = False
        self.finished = False
        self.stop_asked = False
        self.asked_for: StopReason | None = None  # the reason the stop reached the processes with
        self.ended_with: list[str | None] = []
        self.released = False

    def on_event(self, event: Event) -> None:
        self.delivered.append(event)

    def stacks(self) -> StackReport:
        return StackReport("asked for", (), "no processes in a scripted run", "none")

    def _start(self) -> None:
        pass

    def _take_events(self, timeout: float) -> None:
        time.sleep(min(timeout, 0.01))

    def _ended_by_itself(self) -> bool:
        return self.finished or self._stop_reached()

    def _worker_failed(self) -> bool:
        return self.failed

    def _stop_reached(self) -> bool:
        asked_at = self.stop_asked_at
        return asked_at is not None and self.reaches_stop and time.monotonic() - asked_at >= self.stop_takes

    def _ask_to_stop(self) -> None:
        self.stop_asked, self.stop_asked_at, self.asked_for = True, time.monotonic(), self._stopped_by

    def _end_everything(self) -> None:
        self.ended_with.append(self._hard_stop)

    def _ending(self) -> Ending:
        status = "done" if self._hard_stop is None else "interrupted" if self._hard_stop == "interrupt" else "timeout"
        return Ending(status, self._hard_stop, None)

    def _release(self) -> None:
        self.released = True


def follow(run: ScriptedRun, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not run.ended and time.monotonic() < deadline:
        run.poll()


def test_a_failed_worker_ends_every_process_at_once() -> None:
    run = ScriptedRun(LaunchOptions())
    run.start()
    run.failed = True
    follow(run)
    assert run.ended and run.ended_with == [None]


def test_the_timeout_ends_the_run_as_a_timeout() -> None:
    run = ScriptedRun(LaunchOptions(timeout=0.2))
    run.start()
    follow(run)
    assert run.ended_with == ["timeout"] and run.finish().status == "timeout"


def test_a_kill_asked_from_another_thread_ends_the_run_at_the_next_poll() -> None:
    run = ScriptedRun(LaunchOptions())
    run.start()
    threading.Thread(target=run.request_kill).start()
    follow(run)
    assert run.ended_with == ["interrupt"]


def test_a_graceful_stop_that_reaches_its_step_ends_the_run_by_itself() -> None:
    run = ScriptedRun(LaunchOptions(stop_grace=0.2))
    run.start()
    assert run.request_stop() and not run.request_stop()  # asked once
    follow(run)
    assert run.ended and run.ended_with == []  # nothing had to be ended


def test_a_graceful_stop_that_never_reaches_a_step_is_hard_after_its_grace() -> None:
    run = ScriptedRun(LaunchOptions(stop_grace=0.2), reaches_stop=False)
    run.start()
    run.request_stop()
    started = time.monotonic()
    follow(run)
    assert run.ended_with == ["interrupt"] and time.monotonic() - started >= 0.2


def test_a_graceful_stop_waits_as_long_as_the_runs_steps_take_and_says_so() -> None:
    """Steps of 0.5 s and a 0.2 s grace: the stop is reached 0.6 s after it was asked, and nothing is ended hard."""
    run = ScriptedRun(LaunchOptions(stop_grace=0.2), stop_takes=0.6)
    run.start()
    run._deliver(Progress(0, 1, {"loss": 1.0}))
    time.sleep(0.5)  # the step's length, as rank 0's reports show it
    run._deliver(Progress(0, 2, {"loss": 0.9}))
    run.request_stop()
    follow(run)
    assert run.ended and run.ended_with == []  # reached its step boundary: no hard stop
    notes = [event.text for event in run.delivered if isinstance(event, Notice)]
    assert len(notes) == 1 and notes[0].startswith(
        "stopping at the next step boundary every worker reaches after step 2: a step takes about 0.5s, so within about 1."
    )
    assert notes[0].endswith("; interrupt again to stop at once.")
    hard = ScriptedRun(LaunchOptions(stop_grace=0.2), reaches_stop=False)  # the same steps, and a rank that never gets there
    hard.start()
    hard._deliver(Progress(0, 1, {}))
    time.sleep(0.5)
    hard._deliver(Progress(0, 2, {}))
    hard.request_stop()
    asked = time.monotonic()
    follow(hard)
    assert hard.ended_with == ["interrupt"] and time.monotonic() - asked >= 1.0  # two steps of 0.5 s at least


def test_a_rank_that_says_it_evaluates_forever_is_ended_hard_within_the_bound_its_earlier_evaluation_set(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = ScriptedRun(LaunchOptions(stop_grace=0.2), reaches_stop=False)
    run.start()
    run._deliver(Progress(0, 1, {"loss": 1.0}))
    run._deliver(Heartbeat(1, 1, "eval", 1, 0.5))  # an evaluation...
    time.sleep(0.3)
    run._deliver(Heartbeat(1, 1, "train", 1, 0.5))  # ...of 0.3 s
    run.request_stop()
    asked = time.monotonic()
    while not run.ended and time.monotonic() - asked < 15:  # the next one never ends: rank 1 says so at every poll
        run._deliver(Heartbeat(1, 1, "eval", 1, 0.5))
        run.poll()
    took = time.monotonic() - asked
    assert run.ended_with == ["interrupt"]
    assert took <= PHASE_MARGIN * 0.3 + PHASE_SLACK + 0.2 + 0.5  # twice the evaluation seen, a heartbeat's slack, the grace
    said = capsys.readouterr().err
    assert said.startswith("tpu_nb: a rank is still evaluating, past the ") and "ending every worker now" in said


def test_in_the_foreground_a_second_interrupt_ends_at_once_and_the_run_is_released() -> None:
    run = ScriptedRun(LaunchOptions(stop_grace=60), reaches_stop=False)

    def interrupt_twice() -> None:
        for _ in range(2):
            time.sleep(0.3)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # type: ignore[arg-type]

    threading.Thread(target=interrupt_twice).start()
    ending = run_in_foreground(run)
    assert run.stop_asked and run.ended_with == ["interrupt"] and ending.status == "interrupted" and run.released


class DrawingRun(ScriptedRun):
    """A run whose observer is interrupted in the middle of its work (as the dashboard drawing its chart)."""

    def __init__(self) -> None:
        super().__init__(LaunchOptions(stop_grace=60), stop_takes=0.3)
        self.drawn: list[int] = []

    def _take_events(self, timeout: float) -> None:
        self._deliver(Progress(0, len(self.delivered) + 1, {"loss": 1.0}))

    def on_event(self, event: Event) -> None:
        super().on_event(event)
        if len(self.delivered) == 3:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # type: ignore[arg-type]
        time.sleep(0.02)  # the interrupt arrives here, in the middle of the observer's work
        self.drawn.append(len(self.delivered))


def test_in_the_foreground_an_interrupt_is_taken_between_polls_never_inside_an_observer() -> None:
    run = DrawingRun()
    run_in_foreground(run)
    assert run.drawn == list(range(1, len(run.delivered) + 1))  # every event's work finished
    assert run.stop_asked and run.ended_with == [] and run.released  # a graceful stop, ended at its step
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_closing_a_run_that_did_not_end_ends_it() -> None:
    run = ScriptedRun(LaunchOptions())
    run.start()
    run.close()
    assert run.ended_with == ["interrupt"] and run.released
    never_started = ScriptedRun(LaunchOptions())
    never_started.close()
    assert never_started.ended_with == [] and never_started.released


def test_finish_is_for_an_ended_run() -> None:
    with pytest.raises(AssertionError, match="finish\\(\\) is for a run that has ended"):
        ScriptedRun(LaunchOptions()).finish()


def test_a_deadline_asks_for_a_graceful_stop_early_enough_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    run = ScriptedRun(LaunchOptions())
    run._deadline = Deadline(time.time() + 1.0, session_end=False)  # what a run's `_start` sets from --deadline
    run.start()
    follow(run)
    assert run.ended and run.stop_asked and run.ended_with == []  # a graceful stop, nothing ended hard
    said = capsys.readouterr().err
    assert said.startswith("tpu_nb: stopping now: deadline ") and said.rstrip().endswith("(add --checkpoint DIR to save it then).")
    assert run.asked_for is StopReason.DEADLINE and run.stopped_by_deadline
    assert run.stopped_at_a_step_by is StopReason.DEADLINE


def test_the_first_stop_keeps_its_reason() -> None:
    """An interrupt after the deadline's stop asks nothing new: the run stays stopped by its deadline."""
    run = ScriptedRun(LaunchOptions(), reaches_stop=False)
    run.start()
    assert run.request_stop(StopReason.DEADLINE) and not run.request_stop(StopReason.USER)
    assert run.asked_for is StopReason.DEADLINE and run.stopped_by_deadline
    run.close()


def test_a_rank_that_starts_evaluating_after_the_stop_was_announced_is_announced_once() -> None:
    """A stop asked just before a rank's heartbeat says it evaluates: the user learns why the stop now waits longer."""
    run = ScriptedRun(LaunchOptions(stop_grace=0.2), stop_takes=0.4)
    run.start()
    run._deliver(Progress(0, 1, {"loss": 1.0}))
    run.request_stop()
    run.poll()
    for _ in range(3):  # one rank's heartbeats, once a poll: the same phase is named once
        run._deliver(Heartbeat(0, 1, "eval", 1, 0.5))
        run.poll()
    follow(run)
    notes = [event.text for event in run.delivered if isinstance(event, Notice)]
    assert len(notes) == 2, notes
    assert notes[0].startswith("stopping at the next step boundary every worker reaches after step 1: within 0.2s")
    assert notes[1].startswith(
        "stopping at the next step boundary every worker reaches after step 1: a rank is evaluating, waited for up to 15m00s from its start; "
        "then up to"
    )


def test_a_run_log_path_the_os_cannot_take_is_said_and_the_run_still_ends_with_its_ending(capsys: pytest.CaptureFixture[str]) -> None:
    run = ScriptedRun(LaunchOptions(run_log="runs\0log"))  # ValueError from the OS calls, not OSError
    run.start()
    run.finished = True
    follow(run)
    assert run.finish().status == "done"
    said = capsys.readouterr().err
    # the OS call's own words differ by Python version: "embedded null byte" (3.11), "embedded null character in path" (3.13)
    assert "tpu_nb: the run log runs\0log/runs.jsonl could not be written (" in said and "embedded null" in said, said
