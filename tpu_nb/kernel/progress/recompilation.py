"""Compile health, judged step by step: did the training steps after warm-up compile new XLA graphs?

Pure logic, fed by the progress state: every rank's heartbeats say which of
its training steps compiled (each rank reads its process's compile count at
every step boundary), rank 0's reports say where the run is, when it
evaluated and when it first logged a loss. The verdict is a `CompileVerdict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tpu_nb.wire.events import CompileCause, Heartbeat

WARMUP_STEPS = 5
"""The run's first training steps, whose compilations are expected: forward and backward, the optimizer's state on the
second step, the first steps' one-off graphs (a loader that cuts the graph at the next batch shifts them by a step)."""

ONE_OFF_GRACE_STEPS = 3
"""Steps after an evaluation (or the first logged loss) whose compilations are not recompilations. Live, a compiled step
is judged only once rank 0 is this far past it, so an evaluation that rank 0 reports a little later still excuses it."""

MIN_JUDGED_STEPS = 3
"""Steps after warm-up that must pass without compiling before a run is called stable."""

MOST_CAUSES_SHOWN = 2
"""Recompilation causes named in the verdict: the most frequent."""

EVAL_PHASE = "eval"

CompileLevel = Literal["pending", "stable", "warning", "unjudged"]

_FIX = (
    "make every step trace the same graph: pad inputs to a fixed length (padding='max_length', max_length=...) and drop "
    "the last partial batch (drop_last=True / dataloader_drop_last=True); make tensors on the device at fixed sizes; use "
    "torch.where or a mask instead of data-dependent ops (nonzero, x[mask]); pass numbers that change each step as tensors"
)


@dataclass(frozen=True, slots=True)
class CompileVerdict:
    """What the run's steps say about its compilations so far (`final`: the whole run, at its end).

    `compiled` counts the steps after warm-up that compiled again on the rank
    with the most (every rank compiles the same program, so summing would
    multiply by the rank count).
    """

    steps: int  # training steps the run made, by rank 0's step numbers
    warmup_end: int | None  # the last warm-up step; None before the first training step
    judged: int  # steps after warm-up judged so far
    compiled: int
    first_compiled: int | None
    ranks: tuple[int, ...]  # the ranks whose steps compiled again
    causes: tuple[CompileCause, ...] = ()  # the XLA doctor's explanations, most frequent first
    final: bool = False

    @property
    def level(self) -> CompileLevel:
        if self.compiled:
            return "warning"
        if self.judged >= MIN_JUDGED_STEPS:
            return "stable"
        return "unjudged" if self.final else "pending"

    @property
    def headline(self) -> str:
        """ "compiled again at 12 of 13 steps after warm-up (step 5), first at step 6 (ranks 0, 1)", or how far it has got."""
        level = self.level
        if level == "warning":
            ranks = ", ".join(str(rank) for rank in self.ranks)
            rank_label = "rank" if len(self.ranks) == 1 else "ranks"
            return (
                f"compiled again at {self.compiled} of {self.judged} steps after warm-up (step {self.warmup_end}), "
                f"first at step {self.first_compiled} ({rank_label} {ranks})"
            )
        if level == "stable":
            return f"stable after warm-up: none of the {self.judged} steps after it compiled"
        if level == "unjudged":
            if self.warmup_end is None:
                return "no training step reported (report(step=...) in the loop): too short to judge"
            steps = f"{self.steps} step{'' if self.steps == 1 else 's'}"
            return (
                f"{steps}: too short to judge (the first {WARMUP_STEPS} steps compile the step's graphs; "
                f"{MIN_JUDGED_STEPS} more must pass without compiling)"
            )
        return f"warm-up: the first {WARMUP_STEPS} steps"

    @property
    def explanation(self) -> str:
        """Why the steps compiled again and the fix: the doctor's causes with their lines, or the usual causes."""
        if not self.causes:
            return (
                "The step's graph changes from step to step (input shapes moved to or made on the device, a data-dependent "
                f"op such as nonzero, or a Python number baked into the graph), and every new graph compiles. Fix: {_FIX}."
            )
        return " ".join(f"Why: {cause.reason}{f' at {cause.place}' if cause.place else ''}. Fix: {cause.fix}." for cause in self.causes)


class CompileJudge:
    """Tells the compilations a run needs from recompilations, by the steps that compiled.

    Expected, and never counted:
    - warm-up: the first WARMUP_STEPS training steps;
    - an evaluation (it compiles its own graphs) and ONE_OFF_GRACE_STEPS after
      it (the first training step after it may trace a slightly different graph);
    - the first step that logs the training loss and the few after it (a
      Trainer then adds, once, graphs that read and reset its loss accumulator).
    """

    def __init__(self) -> None:
        self._first_step: int | None = None
        self._one_off_steps: set[int] = set()
        self._first_loss_logged = False
        self._compiled: dict[int, set[int]] = {}  # rank -> its training steps that compiled
        # The doctor's causes by place and fix: the newest (its evidence grows, e.g. the shapes seen) and how often sent.
        self._causes: dict[tuple[str | None, str], tuple[CompileCause, int]] = {}

    def on_first_training_step(self, step: int) -> None:
        self._first_step = step

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
        # A heartbeat's causes may belong to a neighbouring heartbeat's steps, so they are pooled.
        for cause in event.causes:
            _older, sent = self._causes.get((cause.place, cause.fix), (cause, 0))
            self._causes[cause.place, cause.fix] = (cause, sent + 1)
        if event.compiled_steps:
            compiled = self._compiled.setdefault(event.rank, set())
            for first, last in event.compiled_steps:
                compiled.update(range(first, last + 1))

    def verdict(self, rank0_step: int | None, final: bool = False) -> CompileVerdict:
        """The verdict with rank 0 at `rank0_step`; `final` judges every step (live, the last few wait, see ONE_OFF_GRACE_STEPS)."""
        first = self._first_step
        if first is None or rank0_step is None:
            return CompileVerdict(0, None, 0, 0, None, (), final=final)
        warmup_end = first + WARMUP_STEPS - 1
        judged_to = rank0_step if final else rank0_step - ONE_OFF_GRACE_STEPS
        recompiled = {
            rank: sorted(step for step in steps if warmup_end < step <= judged_to and not self._excused(step))
            for rank, steps in self._compiled.items()
        }
        recompiled = {rank: steps for rank, steps in recompiled.items() if steps}
        ranked = sorted(self._causes.values(), key=lambda cause_sent: -cause_sent[1])
        causes = tuple(cause for cause, _sent in ranked[:MOST_CAUSES_SHOWN]) if recompiled else ()
        return CompileVerdict(
            steps=max(rank0_step - first + 1, 0),
            warmup_end=warmup_end,
            judged=max(judged_to - warmup_end, 0),
            compiled=max((len(steps) for steps in recompiled.values()), default=0),
            first_compiled=min((steps[0] for steps in recompiled.values()), default=None),
            ranks=tuple(sorted(recompiled)),
            causes=causes,
            final=final,
        )

    def _excused(self, step: int) -> bool:
        return any(start <= step <= start + ONE_OFF_GRACE_STEPS for start in self._one_off_steps)
