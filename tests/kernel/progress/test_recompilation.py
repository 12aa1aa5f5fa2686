"""Compile health judged step by step: recompilations told from warm-up, evaluations and the first logged loss; short runs."""

from __future__ import annotations

import pytest
from support.clock import FakeClock
from support.run_events import RANKS, evaluate, start, train_step

from tpu_nb.kernel.progress.recompilation import ONE_OFF_GRACE_STEPS, WARMUP_STEPS, CompileJudge
from tpu_nb.kernel.progress.state import ProgressState
from tpu_nb.kernel.progress.text import health, health_brief
from tpu_nb.wire.events import CompileCause, Heartbeat, Progress

RUN_LENGTHS = (10, 14, 40)


def run(progress: ProgressState, clock: FakeClock, steps: int, compiled: set[int]) -> None:
    """A hand-written loop's steps 1..`steps`, reported every step; the steps in `compiled` compiled a new graph."""
    start(progress)
    count = 0
    for step in range(1, steps + 1):
        count += step in compiled
        train_step(progress, clock, step, count, {"loss": 1.0 / step}, compiled=step in compiled)


@pytest.mark.parametrize("steps", RUN_LENGTHS)
def test_a_clean_loop_is_stable_after_warm_up(progress: ProgressState, clock: FakeClock, steps: int) -> None:
    """Forward and backward compile at step 1, the optimizer's state at step 2; nothing after."""
    run(progress, clock, steps, compiled={1, 2})
    progress.finish("done")
    snapshot = progress.snapshot()
    assert snapshot.compiles.level == "stable"
    level, text = health(snapshot)
    assert level == "stable"
    assert text == f"2 XLA compilations (4s compiling), stable after warm-up: none of the {steps - WARMUP_STEPS} steps after it compiled"
    assert health_brief(snapshot).startswith("2 compilations, stable")


@pytest.mark.parametrize("steps", RUN_LENGTHS)
def test_a_shape_that_grows_every_step_compiles_again_at_every_step(progress: ProgressState, clock: FakeClock, steps: int) -> None:
    """`x = torch.randn(4 + step, 8, device=device)`: every step is a new graph."""
    run(progress, clock, steps, compiled=set(range(1, steps + 1)))
    progress.finish("done")
    snapshot = progress.snapshot()
    level, text = health(snapshot)
    assert level == "warning"
    judged = steps - WARMUP_STEPS
    assert f"compiled again at {judged} of {judged} steps after warm-up (step {WARMUP_STEPS}), first at step 6 (ranks 0, 1)" in text
    assert "padding='max_length'" in text and "nonzero" in text  # the usual causes and fixes, when the doctor names none
    assert health_brief(snapshot).startswith(f"recompiling: {judged} of {judged} steps after warm-up compiled again")


@pytest.mark.parametrize("steps", RUN_LENGTHS)
def test_a_shape_cycling_through_six_sizes_is_caught_at_its_sixth(progress: ProgressState, clock: FakeClock, steps: int) -> None:
    """`torch.randn(4 + step % 6, 8, device=device)`: six graphs, then each shape again from the cache."""
    run(progress, clock, steps, compiled=set(range(1, 7)))
    progress.finish("done")
    verdict = progress.snapshot().compiles
    assert (verdict.level, verdict.compiled, verdict.judged, verdict.first_compiled) == ("warning", 1, steps - WARMUP_STEPS, 6)


def test_a_run_of_three_steps_is_too_short_to_judge(progress: ProgressState, clock: FakeClock) -> None:
    run(progress, clock, 3, compiled={1, 2})
    assert health(progress.snapshot()) == ("pending", "2 XLA compilations (4s compiling) so far (warm-up: the first 5 steps)")
    progress.finish("done")
    snapshot = progress.snapshot()
    level, text = health(snapshot)
    assert level == "unjudged"
    assert "3 steps: too short to judge" in text and "stable" not in text
    assert "3 steps: too short to judge" in health_brief(snapshot)


def test_a_few_clean_steps_after_warm_up_are_not_yet_stable(progress: ProgressState, clock: FakeClock) -> None:
    run(progress, clock, WARMUP_STEPS + 2, compiled={1, 2})
    progress.finish("done")
    assert progress.snapshot().compiles.level == "unjudged"


def test_a_run_that_never_numbers_its_steps_is_not_called_stable(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    for _ in range(20):
        clock.advance(0.5)
        progress.on_event(Progress(0, None, {"loss": 1.0}))
    progress.finish("done")
    level, text = health(progress.snapshot())
    assert level == "unjudged" and "report(step=...)" in text


def test_live_the_last_steps_wait_and_the_summary_judges_them(progress: ProgressState, clock: FakeClock) -> None:
    """Steps that compiled just before the end are counted in the final verdict (live, an evaluation may still excuse them)."""
    run(progress, clock, 20, compiled={1, 2, 19, 20})
    assert progress.snapshot().compiles.level == "stable"  # live: steps 18-20 are not judged yet
    progress.finish("done")
    verdict = progress.snapshot().compiles
    assert (verdict.level, verdict.compiled, verdict.judged, verdict.first_compiled) == ("warning", 2, 15, 19)


def test_warm_up_evaluations_and_the_first_logged_loss_are_expected(progress: ProgressState, clock: FakeClock) -> None:
    start(progress, compile_count=0)
    clock.advance(60.0)
    expected = {1, 2, 3, 12, 31, 32}  # warm-up; after the first logged loss (step 10); right after the evaluation at 30
    count = 0
    for step in range(1, 101):
        count += step in expected
        train_step(progress, clock, step, count, {"loss": 1.0 / step} if step % 10 == 0 else None, compiled=step in expected)
        if step == 30:
            count += 3  # the evaluation's own graphs: compiled at its boundaries, which are no training step's
            evaluate(progress, clock, step, count)
    assert progress.snapshot().compiles.level == "stable"
    progress.finish("done")
    assert progress.snapshot().compiles.level == "stable"


def test_compilations_while_workers_say_eval_are_expected(progress: ProgressState, clock: FakeClock) -> None:
    """A loop that only tells its heartbeats it is evaluating (no eval metrics reported)."""
    start(progress)
    for step in range(1, 21):
        train_step(progress, clock, step, 3)
    clock.advance(1.0)
    for rank in RANKS:
        progress.on_event(Heartbeat(rank, 20, "eval", 6, 12.0))
    for step in range(21, 31):
        train_step(progress, clock, step, 7, compiled=step == 21)  # the first step after it compiles once more
    progress.finish("done")
    assert progress.snapshot().compiles.level == "stable"


def test_an_evaluation_reported_after_the_step_s_heartbeat_still_excuses_it(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    for step in range(1, 40):
        train_step(progress, clock, step, 3)
    # Rank 1's heartbeat (phase train again) carries step 40's compilation before rank 0's report of the evaluation.
    progress.on_event(Heartbeat(1, 40, "train", 6, 12.0, compiled_steps=((40, 40),)))
    progress.on_event(Progress(0, 40, {"eval_loss": 0.4}))
    for step in range(41, 41 + ONE_OFF_GRACE_STEPS + 5):
        train_step(progress, clock, step, 6)
    assert progress.snapshot().compiles.level == "stable"


def test_one_recompiling_rank_is_named(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    for step in range(1, 20):
        train_step(progress, clock, step, 3)
        if step == 9:
            progress.on_event(Heartbeat(1, 9, "train", 4, 8.0, compiled_steps=((9, 9),)))
    verdict = progress.snapshot().compiles
    assert (verdict.compiled, verdict.first_compiled, verdict.ranks) == (1, 9, (1,))
    # Live, rank 0 at step 19: steps 6-16 are judged (the last few wait for an evaluation that may excuse them).
    assert "compiled again at 1 of 11 steps after warm-up (step 5), first at step 9 (rank 1)" in health(progress.snapshot())[1]


def test_compiled_steps_that_arrive_late_are_still_counted(progress: ProgressState, clock: FakeClock) -> None:
    """A fast loop: a heartbeat carries runs of steps rank 0 has long passed."""
    start(progress)
    for step in range(1, 101):
        clock.advance(0.01)
        progress.on_event(Progress(0, step, {}, max_steps=100))
    progress.on_event(Heartbeat(0, 100, "train", 90, 9.0, compiled_steps=((1, 60), (70, 99))))
    verdict = progress.snapshot().compiles
    assert (verdict.compiled, verdict.judged, verdict.first_compiled) == (55 + 28, 92, 6)  # live: to step 97


def test_the_doctors_causes_explain_the_verdict(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    for step in range(1, WARMUP_STEPS + 1):
        train_step(progress, clock, step, 3)
    cause = CompileCause(
        "a tensor made on the device changes shape ((5, 8), (6, 8), (7, 8))",
        "In [4], line 5: x = torch.randn(4 + step, 8, device=device)",
        "make it at one fixed size",
    )
    progress.on_event(Heartbeat(0, 6, "train", 4, 8.0, causes=(cause,), compiled_steps=((6, 6),)))
    for step in range(7, 12):
        train_step(progress, clock, step, 4)
    verdict = progress.snapshot().compiles
    assert verdict.causes == (cause,)
    assert (
        "Why: a tensor made on the device changes shape ((5, 8), (6, 8), (7, 8)) at "
        "In [4], line 5: x = torch.randn(4 + step, 8, device=device). Fix: make it at one fixed size." in health(progress.snapshot())[1]
    )


def test_causes_alone_do_not_make_a_warning() -> None:
    """The doctor may explain a warm-up step's graph; without a step that compiled again, the run is stable."""
    judge = CompileJudge()
    judge.on_first_training_step(1)
    judge.on_heartbeat(Heartbeat(0, 3, "train", 3, 1.0, causes=(CompileCause("why", None, "fix"),), compiled_steps=((1, 3),)), 3)
    verdict = judge.verdict(20, final=True)
    assert (verdict.level, verdict.causes) == ("stable", ())
