"""How long a graceful stop waits for its step boundary: as long as a step of this run takes, learned as it runs.

On a TPU a step that compiles, evaluates or saves takes seconds to minutes;
a stop that waited a fixed few seconds ended such runs hard and lost their
last checkpoint and their weights. The kernel learns from the events it
gets anyway: rank 0's step times (its progress and heartbeats), the longest
checkpoint save, and whether a rank is compiling, evaluating or saving now
(each rank's heartbeat, once a second). A stop waits, from when it was asked
or from when the last such long phase ended, for two of the longest steps
(the ranks agree on a stop step one past the furthest rank, so the step in
progress and one more) plus a save when one is due, with a margin; never
less than `--stop-grace`. Before two steps are timed, the time from the
workers' start to the first step stands for a step: a run stopped (by its
deadline, say) during its second step, slow on a busy host, was ended hard
after the grace and lost its checkpoint.

A long phase is waited for as it runs, but for a bounded time from its
start: twice the longest phase of its kind this run has finished (and two
seconds, for the heartbeats heard late at either end), fifteen minutes for
the first of its kind, never more than an hour nor less than the grace;
then the wait for the step boundary runs out and the stop is hard. A rank
hung inside an evaluation, saying "evaluating" once a second forever, kept
its run past its deadline while every heartbeat restarted the wait.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_nb.basics.units import format_duration
from tpu_nb.wire.checkpoints import CheckpointPlan
from tpu_nb.wire.events import CheckpointSaved, Event, Heartbeat, Progress

MARGIN = 1.5
"""A step may take longer than the longest seen so far (another batch, a slower host): half as long again."""
HEARTBEAT_FRESH = 3.0
"""Seconds a heartbeat's phase stands for its rank: past that, a silent rank is not waited for as busy."""
BUSY_PHASES = {"eval": "evaluating", "saving": "saving a checkpoint"}
PHASE_FIRST = 15 * 60.0
"""Seconds a stop waits for a long phase of a kind this run has not finished yet (a TPU compiles or evaluates for minutes)."""
PHASE_MARGIN = 2.0
"""A long phase may take longer than the longest of its kind so far: twice as long."""
PHASE_SLACK = 2.0
"""Seconds a phase may be longer than heard: a heartbeat comes once a second, so its start and its end are heard late."""
PHASE_CEILING = 3600.0
"""Seconds a stop waits for one long phase at most, whatever the earlier ones took."""
WARMUP_STEPS = 5
"""Rank 0's first steps, which compile their graphs: their times stand for a step only until later ones are timed
(a compilation is waited for as it runs, said by the heartbeats)."""


@dataclass(frozen=True, slots=True)
class LongPhase:
    """A rank's long phase as its heartbeats tell it: what it does, of which kind, since when, and when last heard."""

    kind: str  # "compiling", "evaluating", "saving a checkpoint"
    doing: str  # what the user is told: "compiling (for 40s)", "evaluating"
    began: float  # monotonic
    heard: float  # monotonic


@dataclass(frozen=True, slots=True)
class StopWait:
    """What a graceful stop is waiting for, at one moment."""

    seconds: float  # from `since` until the run is ended hard
    since: float  # monotonic time the wait counts from: the request, or the end of the last long phase
    step_seconds: float | None  # the longest step seen
    busy: str | None  # what a rank is doing now that the stop waits for without counting ("compiling (for 40s)")
    last_step: int | None  # rank 0's
    busy_limit: float | None  # seconds from its start that long phase is waited for at most

    @property
    def until(self) -> float:
        return self.since + self.seconds

    def text(self, grace: float) -> str:
        """The cell's and the dashboard's words: what the stop waits for, and how to stop now."""
        after = "" if self.last_step is None else f" after step {self.last_step}"
        if self.busy is not None:
            limit = "" if self.busy_limit is None else f", waited for up to {format_duration(self.busy_limit)} from its start"
            why = f"a rank is {self.busy}{limit}; then up to {format_duration(self.seconds)} for the step boundary"
        elif self.step_seconds is not None and self.seconds > grace:
            why = f"a step takes about {format_duration(self.step_seconds)}, so within about {format_duration(self.seconds)}"
        else:
            why = f"within {format_duration(self.seconds)}"
        return f"stopping at the next step boundary every worker reaches{after}: {why}; interrupt again to stop at once."

    def overrun_text(self) -> str:
        """What the cell says when the wait ran out and every worker is ended."""
        if self.busy is not None and self.busy_limit is not None:
            return (
                f"a rank is still {self.busy}, past the {format_duration(self.busy_limit)} a stop waits for that from its start "
                f"and {format_duration(self.seconds)} more for the step boundary: ending every worker now."
            )
        return f"no step boundary within {self.seconds:.0f}s of the stop: ending every worker now."


class StopClock:
    """Learns, from a run's events as the kernel gets them, how long a graceful stop of that run may take."""

    def __init__(self, grace: float, checkpoints: CheckpointPlan | None = None) -> None:
        self.grace = grace
        self.checkpoints = checkpoints
        self._first_heard_at: float | None = None  # the run's first event (its workers' start)
        self._until_first_step: float | None = None  # from then to rank 0's first step, per step: before any step is timed
        self._longest_warmup_step: float | None = None
        self._longest_later_step: float | None = None
        self.longest_save: float | None = None  # seconds the step waited for a checkpoint (its copy to host memory)
        self.longest_save_written: float | None = None  # seconds from a step's end to its checkpoint written and checked
        self.last_step: int | None = None
        self._stepped_at: float | None = None
        self._saved_at: float | None = None  # when the last checkpoint was reported
        self._busy: dict[tuple[int, str], LongPhase] = {}  # (rank, "phase" or "compiling") -> the long phase it is in
        self._busy_until: float | None = None  # when a long phase was last heard of
        self._longest_phase: dict[str, float] = {}  # kind -> seconds the longest finished phase of that kind took

    @property
    def longest_step(self) -> float | None:
        """The longest step seen after warm-up; before there is one, the longest warm-up step; before any step is timed,
        the time from the workers' start to the first step (a step that compiles can take that long again)."""
        for seconds in (self._longest_later_step, self._longest_warmup_step, self._until_first_step):
            if seconds is not None:
                return seconds
        return None

    def on_event(self, event: Event, now: float) -> None:
        """Take what an event says about step times, saves and long phases (`now`: monotonic, when it arrived)."""
        if self._first_heard_at is None:
            self._first_heard_at = now
        if isinstance(event, Progress | Heartbeat) and event.rank == 0 and event.step is not None and event.phase in (None, "train"):
            self._on_step(event.step, now)
        if isinstance(event, Heartbeat):
            self._on_phase(event, now)
        elif isinstance(event, CheckpointSaved):
            # The step waits for the copy to host memory only; the writing and checking go on beside training.
            self._saved_at = now
            self.longest_save = max(event.stall_seconds, self.longest_save or 0.0)
            self.longest_save_written = max(event.seconds, self.longest_save_written or 0.0)

    def wait(self, requested_at: float, now: float) -> StopWait:
        """How long a stop asked at `requested_at` waits, seen at `now`."""
        since = requested_at if self._busy_until is None else max(requested_at, self._busy_until)
        learned = 0.0
        if self.longest_step is not None:
            save = self.longest_save or 0.0 if self._save_due(now) else 0.0
            learned = MARGIN * (2 * self.longest_step + save)
        seconds = max(self.grace, learned)
        busy = self._fresh_phases(now)
        if not busy:
            return StopWait(seconds, since, self.longest_step, None, self.last_step, None)
        # The phase waited for longest sets the wait; the step boundary's wait counts from its end, or from its bound.
        phase = max(busy, key=lambda phase: phase.began + self.phase_limit(phase.kind))
        limit = self.phase_limit(phase.kind)
        since = max(requested_at, min(now, phase.began + limit))
        return StopWait(seconds, since, self.longest_step, phase.doing, self.last_step, limit)

    def phase_limit(self, kind: str) -> float:
        """Seconds from its start a stop waits for a long phase of `kind` (never less than the grace)."""
        longest = self._longest_phase.get(kind)
        limit = PHASE_FIRST if longest is None else min(PHASE_CEILING, PHASE_MARGIN * longest + PHASE_SLACK)
        return max(self.grace, limit)

    def planned(self, now: float) -> float | None:
        """What a stop will take by the steps after warm-up (None until one is timed): how early a deadline's stop comes.

        Warm-up steps compile, and a compilation during a stop is waited for as it runs: planning for it at every
        step would stop a run long before its deadline.
        """
        if self._longest_later_step is None:
            return None
        save = self.longest_save or 0.0 if self._save_due(now) else 0.0
        return MARGIN * (2 * self._longest_later_step + save)

    def _fresh_phases(self, now: float) -> list[LongPhase]:
        """The long phases heard of lately: past HEARTBEAT_FRESH, a silent rank is not waited for as busy."""
        return [phase for phase in self._busy.values() if now - phase.heard <= HEARTBEAT_FRESH]

    def _on_phase(self, heartbeat: Heartbeat, now: float) -> None:
        """Follow a rank's long phases: when each began, and how long each kind took once finished.

        A compilation is followed beside the phase it happens in (an evaluation compiles its graph): it neither ends
        that phase nor counts in its time.
        """
        doing = BUSY_PHASES.get(heartbeat.phase)
        self._follow((heartbeat.rank, "phase"), doing, doing or "", now)
        compiling = heartbeat.compiling
        if compiling is None:
            self._follow((heartbeat.rank, "compiling"), None, "", now)
        else:  # a compilation says how long it has run
            self._follow((heartbeat.rank, "compiling"), "compiling", f"compiling (for {format_duration(compiling)})", now, now - compiling)

    def _follow(self, slot: tuple[int, str], kind: str | None, doing: str, now: float, began: float | None = None) -> None:
        """Take what a heartbeat says of one of a rank's long phases: its kind (None: in none now), and when it `began` if
        the rank says (else when first heard). One that ended counts for its kind."""
        previous = self._busy.pop(slot, None)
        # The same phase heard again: of the same kind, and begun before it was last heard (a new compilation is not).
        same = previous is not None and previous.kind == kind and (began is None or began <= previous.heard)
        if previous is not None and not same:
            self._longest_phase[previous.kind] = max(now - previous.began, self._longest_phase.get(previous.kind, 0.0))
        if kind is not None:
            start = previous.began if previous is not None and same else now if began is None else began
            self._busy[slot] = LongPhase(kind, doing, start, now)
            self._busy_until = now

    def _on_step(self, step: int, now: float) -> None:
        if self.last_step is None and self._first_heard_at is not None and now > self._first_heard_at and step > 0:
            self._until_first_step = (now - self._first_heard_at) / step
        if self.last_step is not None and self._stepped_at is not None and step > self.last_step:
            per_step = (now - self._stepped_at) / (step - self.last_step)
            if step <= WARMUP_STEPS:
                self._longest_warmup_step = max(per_step, self._longest_warmup_step or 0.0)
            else:
                self._longest_later_step = max(per_step, self._longest_later_step or 0.0)
        if self.last_step is None or step != self.last_step:
            self.last_step, self._stepped_at = step, now

    def _save_due(self, now: float) -> bool:
        """A periodic checkpoint may fall within the two steps a stop waits for."""
        plan = self.checkpoints
        if plan is None:
            return False
        if plan.every.steps is not None:
            following = (self.last_step or 0) + 1
            return any(step % plan.every.steps == 0 for step in (following, following + 1))
        since_save = now - (self._saved_at if self._saved_at is not None else now)
        return self._saved_at is None or since_save + 2 * (self.longest_step or 0.0) >= (plan.every.seconds or 0.0)
