"""Telling the XLA compilations a run needs from recompilations caused by changing shapes (a judge of compile counts).

Pure logic, fed by the progress state with each heartbeat's compile count
and rank 0's steps; its verdict is a `RecompilationWarning`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpu_nb.wire.events import CompileCause, Heartbeat

WARMUP_STEPS = 5
"""Rank 0's first training steps, whose XLA compilations are expected."""

ONE_OFF_GRACE_STEPS = 3
"""Steps after an evaluation (or the first logged loss) whose compilations are not recompilations."""

MOST_CAUSES_SHOWN = 2
"""Recompilation causes named in the warning: the most frequent."""

EVAL_PHASE = "eval"

_FIX = (
    "pad inputs to a fixed length (padding='max_length', max_length=...) and drop the last "
    "partial batch (drop_last=True / dataloader_drop_last=True)"
)


@dataclass(frozen=True, slots=True)
class RecompilationWarning:
    """XLA kept compiling after warm-up: the input shapes change between steps.

    `count` is the most extra compilations on any one worker (every worker
    compiles the same program, so summing would multiply by the worker count).
    """

    count: int
    since_step: int
    ranks: tuple[int, ...]
    causes: tuple[CompileCause, ...] = ()  # the XLA doctor's explanations, most frequent first

    @property
    def text(self) -> str:
        plural = "" if self.count == 1 else "s"
        ranks = ", ".join(str(rank) for rank in self.ranks)
        rank_label = "rank" if len(self.ranks) == 1 else "ranks"
        headline = f"{self.count} XLA recompilation{plural} after warm-up since step {self.since_step} ({rank_label} {ranks})"
        if not self.causes:
            return f"{headline}: input shapes change between steps, and every new shape compiles a new graph. Fix: {_FIX}."
        explained = " ".join(
            f"Why: {cause.reason}{f' at {cause.place}' if cause.place else ''}. Fix: {cause.fix}." for cause in self.causes
        )
        return f"{headline}. {explained}"


@dataclass(frozen=True, slots=True)
class _CompileIncrease:
    """A worker's compile count grew between two heartbeats, sent at these steps."""

    rank: int
    amount: int
    after_step: int | None  # the earlier heartbeat's step (None: unknown, i.e. the start)
    seen_at_step: int


class RecompilationJudge:
    """Tells expected XLA compilations from recompilations caused by changing shapes.

    Heartbeats arrive about once a second, so a compilation is only known to
    have happened between two heartbeats; it is excused when that span touches
    a time when new graphs are expected:
    - warm-up: rank 0's first WARMUP_STEPS training steps;
    - evaluation (compiles its own graphs) and ONE_OFF_GRACE_STEPS after it
      (the first training step after it may trace a slightly different graph);
    - the first step that logs the training loss (Trainer then adds, once,
      graphs that read and reset its loss accumulator).
    An increase is judged (once) when rank 0 is ONE_OFF_GRACE_STEPS past it, so
    an evaluation that rank 0 reports a little later still excuses it; ones
    still pending when the run ends (final logging, saving) are never counted.
    """

    def __init__(self) -> None:
        self._warmup_end: int | None = None  # the last warm-up step
        self._one_off_steps: set[int] = set()
        self._first_loss_logged = False
        self._last: dict[int, tuple[int, int | None]] = {}  # rank -> (compile count, step)
        self._pending: list[_CompileIncrease] = []
        self._extra_by_rank: dict[int, int] = {}
        self._first_extra_step: int | None = None
        self._causes: dict[CompileCause, int] = {}  # the doctor's causes of compilations after warm-up -> how often

    def on_first_training_step(self, step: int) -> None:
        self._warmup_end = step + WARMUP_STEPS - 1

    def on_one_off_graphs(self, step: int) -> None:
        self._one_off_steps.add(step)

    def on_loss_logged(self, step: int) -> None:
        if not self._first_loss_logged:
            self._first_loss_logged = True
            self._one_off_steps.add(step)

    def on_heartbeat(self, event: Heartbeat, rank0_step: int | None) -> None:
        # Workers in a hand-written loop may not know their step; rank 0's is close.
        step = event.step if event.step is not None else rank0_step
        if event.phase == EVAL_PHASE and step is not None:
            self._one_off_steps.add(step)
        # The doctor explains only compilations after its own warm-up; a heartbeat's
        # causes may belong to a neighbouring heartbeat's count, so they are pooled.
        for cause in event.causes:
            self._causes[cause] = self._causes.get(cause, 0) + 1
        previous = self._last.get(event.rank)
        self._last[event.rank] = (event.compile_count, step)
        # A worker's first heartbeat only sets its baseline: its earlier compilations are start-up.
        if previous is None or step is None or event.compile_count <= previous[0]:
            return
        previous_count, previous_step = previous
        after_step = None if previous_step is None else min(previous_step, step)
        self._pending.append(_CompileIncrease(event.rank, event.compile_count - previous_count, after_step, step))

    def on_rank0_step(self, rank0_step: int) -> None:
        """Judge the increases rank 0 is now far enough past."""
        settled = [increase for increase in self._pending if rank0_step > increase.seen_at_step + ONE_OFF_GRACE_STEPS]
        self._pending = [increase for increase in self._pending if rank0_step <= increase.seen_at_step + ONE_OFF_GRACE_STEPS]
        for increase in settled:
            if self._is_recompilation(increase):
                self._extra_by_rank[increase.rank] = self._extra_by_rank.get(increase.rank, 0) + increase.amount
                if self._first_extra_step is None or increase.seen_at_step < self._first_extra_step:
                    self._first_extra_step = increase.seen_at_step

    def warmed_up(self, rank0_step: int | None) -> bool:
        return self._warmup_end is not None and rank0_step is not None and rank0_step >= self._warmup_end

    def warning(self) -> RecompilationWarning | None:
        if self._first_extra_step is None:
            return None
        causes = tuple(sorted(self._causes, key=lambda cause: -self._causes[cause])[:MOST_CAUSES_SHOWN])
        return RecompilationWarning(max(self._extra_by_rank.values()), self._first_extra_step, tuple(sorted(self._extra_by_rank)), causes)

    def _is_recompilation(self, increase: _CompileIncrease) -> bool:
        if self._warmup_end is None or increase.after_step is None or increase.after_step < self._warmup_end:
            return False
        return not any(
            start <= increase.seen_at_step and increase.after_step <= start + ONE_OFF_GRACE_STEPS for start in self._one_off_steps
        )
