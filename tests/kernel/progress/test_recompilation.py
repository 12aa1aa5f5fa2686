"""Recompilations told from the compilations a run needs: warm-up, evaluations, the first logged loss."""

from __future__ import annotations

from support.clock import FakeClock
from support.run_events import RANKS, evaluate, start, train_step

from tpu_nb.kernel.progress.recompilation import ONE_OFF_GRACE_STEPS, WARMUP_STEPS
from tpu_nb.kernel.progress.state import ProgressState
from tpu_nb.wire.events import CompileCause, Heartbeat, Progress


def test_static_shapes_do_not_warn(progress: ProgressState, clock: FakeClock) -> None:
    """Warm-up, evaluations and the first logged loss all compile new graphs once."""
    start(progress, compile_count=0)
    clock.advance(60.0)
    counts = {1: 2, 2: 3, 3: 4}  # forward+backward, then the steady-state step, then the scheduler
    compile_count = 0
    for step in range(1, 101):
        compile_count = counts.get(step, compile_count)
        if step == 12:
            compile_count += 2  # the step after the first logged loss (step 10) resets the accumulator
        if step in (31, 32):
            compile_count += 1  # right after the first evaluation
        train_step(progress, clock, step, compile_count, {"loss": 1.0 / step} if step % 10 == 0 else None)
        if step % 30 == 0:
            if step == 30:
                compile_count += 3  # evaluation graphs, compiled once
            evaluate(progress, clock, step, compile_count)

    snapshot = progress.snapshot()
    assert snapshot.warmed_up
    assert snapshot.compile_count == compile_count == 11
    assert snapshot.recompilation is None
    progress.finish("done")
    assert progress.snapshot().recompilation is None


def test_compilations_while_workers_say_eval_are_expected(progress: ProgressState, clock: FakeClock) -> None:
    """A loop that only tells its heartbeats it is evaluating (no eval metrics reported)."""
    start(progress)
    for step in range(1, 21):
        train_step(progress, clock, step, 3)
    for compile_count in (4, 5, 6):  # each eval batch shape compiles once
        clock.advance(1.0)
        for rank in RANKS:
            progress.on_event(Heartbeat(rank, 20, "eval", compile_count, 2.0 * compile_count))
    for step in range(21, 31):
        train_step(progress, clock, step, 7)  # the first step after it compiles once more
    assert progress.snapshot().recompilation is None


def test_growing_compilations_after_warmup_warn(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    for step in range(1, WARMUP_STEPS + 1):
        train_step(progress, clock, step, 3)
    assert progress.snapshot().warmed_up
    for step, compile_count in zip(range(6, 20), [4, 5, 5, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7], strict=True):
        train_step(progress, clock, step, compile_count)

    warning = progress.snapshot().recompilation
    assert warning is not None
    assert (warning.count, warning.since_step, warning.ranks) == (4, 6, (0, 1))
    assert "4 XLA recompilations after warm-up since step 6" in warning.text
    assert "padding='max_length'" in warning.text
    assert "dataloader_drop_last=True" in warning.text


def test_one_recompiling_rank_is_named(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    for step in range(1, 20):
        train_step(progress, clock, step, 3)
        if step == 9:
            progress.on_event(Heartbeat(1, 9, "train", 4, 8.0))

    warning = progress.snapshot().recompilation
    assert warning is not None
    assert (warning.count, warning.since_step, warning.ranks) == (1, 9, (1,))
    assert "1 XLA recompilation after warm-up since step 9 (rank 1)" in warning.text


def test_ranks_that_never_report_are_still_watched(progress: ProgressState, clock: FakeClock) -> None:
    """A loop that calls report() on rank 0 only: rank 1's heartbeats say "starting", with no step."""
    start(progress)
    for step in range(1, 30):
        clock.advance(0.5)
        progress.on_event(Progress(0, step, {"loss": 1.0}, max_steps=200, phase="train"))
        progress.on_event(Heartbeat(0, step, "train", 3, 6.0))
        progress.on_event(Heartbeat(1, None, "starting", 3 if step < 10 else step - 6, 6.0))

    warning = progress.snapshot().recompilation
    assert warning is not None
    assert (warning.count, warning.since_step, warning.ranks) == (16, 10, (1,))  # steps 10-25 are judged by step 29


def test_recompilation_is_judged_only_a_few_steps_later(progress: ProgressState, clock: FakeClock) -> None:
    """An evaluation rank 0 reports after another rank's heartbeat still excuses its compilations."""
    start(progress)
    for step in range(1, 40):
        train_step(progress, clock, step, 3)
    # A short evaluation at step 40: rank 1's heartbeat (phase train again) arrives before rank 0's report.
    progress.on_event(Heartbeat(1, 40, "train", 6, 12.0))
    assert progress.snapshot().recompilation is None
    progress.on_event(Progress(0, 40, {"eval_loss": 0.4}))
    progress.on_event(Heartbeat(0, 40, "train", 6, 12.0))
    for step in range(41, 41 + ONE_OFF_GRACE_STEPS + 5):
        train_step(progress, clock, step, 6)
    assert progress.snapshot().recompilation is None


def test_compilations_in_the_last_steps_are_not_judged(progress: ProgressState, clock: FakeClock) -> None:
    """Trainer's final logging and saving compile once at the end: not a shape problem."""
    start(progress)
    for step in range(1, 31):
        train_step(progress, clock, step, 3)
    train_step(progress, clock, 30, 5)
    progress.finish("done")
    assert progress.snapshot().recompilation is None


def test_the_doctors_causes_explain_the_recompilation_warning(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    for step in range(1, WARMUP_STEPS + 1):
        train_step(progress, clock, step, 3)
    cause = CompileCause("input shape changed (batch 13 vs 16)", "In [4], line 12: torch_xla.sync()", "drop the last partial batch")
    progress.on_event(Heartbeat(0, 6, "train", 4, 8.0, causes=(cause,)))
    for step in range(7, 12):
        train_step(progress, clock, step, 4)

    warning = progress.snapshot().recompilation
    assert warning is not None and warning.causes == (cause,)
    assert (
        "Why: input shape changed (batch 13 vs 16) at In [4], line 12: torch_xla.sync(). Fix: drop the last partial batch." in warning.text
    )
