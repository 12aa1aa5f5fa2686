from __future__ import annotations

import pytest
from support.clock import FakeClock
from support.run_events import RANKS, evaluate, start, train_step

from tpu_nb.kernel.endings.status import RUN_STATUSES
from tpu_nb.kernel.progress.state import RATE_WINDOW_SECONDS, ProgressState
from tpu_nb.kernel.progress.text import health
from tpu_nb.wire.events import (
    CheckpointSaved,
    Diagnosis,
    Heartbeat,
    History,
    Notice,
    Output,
    Progress,
    WorkerFinished,
    WorkerRaised,
    WorkerStarted,
)


def test_phases_follow_the_run(progress: ProgressState, clock: FakeClock) -> None:
    assert progress.snapshot().phase == "starting"
    progress.on_event(WorkerStarted(0, 2, 100, "xla:0"))
    assert progress.snapshot().phase == "compiling"
    progress.on_event(Heartbeat(0, 0, "train", 1, 30.0))  # still compiling the first step
    assert progress.snapshot().phase == "compiling"
    train_step(progress, clock, 1, 2)
    assert progress.snapshot().phase == "training"
    clock.advance(1.0)
    progress.on_event(Progress(0, 1, {}, phase="eval"))
    assert progress.snapshot().phase == "evaluating"
    train_step(progress, clock, 2, 2)
    assert progress.snapshot().phase == "training"
    progress.finish("done")
    assert progress.snapshot().phase == "done"
    assert progress.snapshot().finished


def test_step_rates_and_eta_come_from_recent_steps(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    clock.advance(90.0)  # the first compilation must not drag the rate down
    for step in range(1, 21):  # slow steps first: 1 step/s ...
        train_step(progress, clock, step, 3, seconds=1.0)
    for step in range(21, 121):  # ... then 4 steps/s, for longer than the window
        train_step(progress, clock, step, 3, seconds=0.25)

    snapshot = progress.snapshot()
    assert RATE_WINDOW_SECONDS < 100 * 0.25
    assert snapshot.step == 120
    assert snapshot.max_steps == 200
    assert snapshot.epoch == pytest.approx(2.4)
    assert snapshot.steps_per_second == pytest.approx(4.0)
    assert snapshot.throughput.samples_per_second == pytest.approx(4.0 * 64)
    assert snapshot.throughput.tokens_per_second == pytest.approx(4.0 * 64 * 128)
    assert snapshot.eta == pytest.approx(80 / 4.0)
    assert snapshot.fraction_done == pytest.approx(0.6)


def test_rate_is_unknown_until_two_steps_and_elapsed_counts_from_creation(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    clock.advance(60.0)
    train_step(progress, clock, 1, 3)
    snapshot = progress.snapshot()
    assert snapshot.steps_per_second is None
    assert snapshot.eta is None
    assert snapshot.elapsed == pytest.approx(60.5)


def test_sparse_steps_still_give_a_rate(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    for step in range(1, 5):
        train_step(progress, clock, step, 3, seconds=RATE_WINDOW_SECONDS * 1.5)
    assert progress.snapshot().steps_per_second == pytest.approx(1 / (RATE_WINDOW_SECONDS * 1.5))


def test_metric_rows_are_trainer_style(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    for step in range(1, 21):
        metrics = {"loss": 2.0 / step, "learning_rate": 1e-4, "grad_norm": 1.5, "epoch": step / 50} if step % 10 == 0 else {}
        train_step(progress, clock, step, 3, metrics)
    evaluate(progress, clock, 20, 5)
    evaluate(progress, clock, 20, 5)  # the same values again: no new row
    clock.advance(1.0)
    progress.on_event(Progress(0, 20, {"train_loss": 0.3, "train_runtime": 12.0, "total_flos": 1e12}))

    snapshot = progress.snapshot()
    assert [row.step for row in snapshot.history] == [10, 20]
    assert dict(snapshot.history[0].values) == {"loss": 0.2, "learning_rate": 1e-4, "grad_norm": 1.5}
    # Training and evaluation logs of one step share a row; bookkeeping is left out.
    assert dict(snapshot.history[1].values) == {
        "loss": 0.1,
        "learning_rate": 1e-4,
        "grad_norm": 1.5,
        "eval_loss": 0.5,
        "eval_accuracy": 0.8,
        "train_loss": 0.3,
    }
    assert snapshot.metric_names == ("loss", "learning_rate", "grad_norm", "eval_loss", "eval_accuracy", "train_loss")
    assert snapshot.latest["loss"] == 0.1
    assert snapshot.latest["eval_accuracy"] == 0.8


def test_malformed_metric_values_are_dropped(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    train_step(progress, clock, 1, 3, {"loss": 0.5, "note": "text", "flag": True})  # type: ignore[dict-item]
    assert dict(progress.snapshot().history[0].values) == {"loss": 0.5}


def test_workers_last_heard_and_stale(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    train_step(progress, clock, 1, 2)
    clock.advance(20.0)
    progress.on_event(Heartbeat(0, 2, "train", 2, 4.0))
    progress.on_event(WorkerFinished(0))
    clock.advance(15.0)

    worker0, worker1 = progress.snapshot().workers
    assert (worker0.rank, worker0.device, worker0.step, worker0.phase) == (0, "xla:0", 2, "finished")
    assert worker0.seconds_since_heard == pytest.approx(15.0)
    assert not worker0.stale  # finished workers are quiet on purpose
    assert (worker1.rank, worker1.step, worker1.phase, worker1.compile_count, worker1.compile_seconds) == (1, 1, "train", 2, 4.0)
    assert worker1.seconds_since_heard == pytest.approx(35.0)
    assert worker1.stale

    progress.on_event(Output(1, "stdout", "still here\n"))
    assert progress.snapshot().workers[1].seconds_since_heard == 0.0


def test_failures_and_notices(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    text = "Trainer: optim adamw_torch_fused -> adamw_torch (fused AdamW fails on XLA)"
    for rank in RANKS:
        progress.on_event(Notice(rank, text))
    progress.on_event(Notice(0, "second"))
    progress.on_event(WorkerRaised(1, "RuntimeError: boom"))
    progress.on_event(Heartbeat(1, 3, "train", 3, 6.0))  # trailing heartbeat

    snapshot = progress.snapshot()
    assert snapshot.notices == (text, "second")
    assert snapshot.failures == ("rank 1: RuntimeError: boom",)
    assert snapshot.workers[1].phase == "failed"


@pytest.mark.parametrize("status", RUN_STATUSES)
def test_finish_freezes_the_run(progress: ProgressState, clock: FakeClock, status: str) -> None:
    start(progress)
    for step in range(1, 11):
        train_step(progress, clock, step, 3)
    progress.finish(status, "detail text")  # type: ignore[arg-type]
    clock.advance(100.0)
    train_step(progress, clock, 11, 3)  # a straggling event changes nothing

    snapshot = progress.snapshot()
    assert (snapshot.phase, snapshot.detail, snapshot.step) == (status, "detail text", 10)
    assert snapshot.finished
    assert snapshot.eta is None
    assert snapshot.elapsed == pytest.approx(5.0)
    assert snapshot.workers[0].seconds_since_heard == 0.0


def test_finish_rejects_an_unknown_status(progress: ProgressState) -> None:
    with pytest.raises(ValueError, match="status must be one of"):
        progress.finish("crashed")  # type: ignore[arg-type]


def test_world_size_from_the_workers_wins(clock: FakeClock) -> None:
    progress = ProgressState("t", "r", expected_workers=8, clock=clock)
    progress.on_event(WorkerStarted(0, 4, 100, "xla:0"))
    assert progress.snapshot().expected_workers == 4


def test_a_diagnosis_is_replaced_by_fresher_evidence_and_memory_and_cache_are_shown(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    first = Diagnosis(0, "host-reads", "Host syncs", "1.0 reads per step", ("In [3], line 9: loss.item()",), "report(loss=...)", 10)
    progress.on_event(first)
    progress.on_event(Diagnosis(1, "host-reads", "Host syncs", "2.0 reads per step", (), "report(loss=...)", 20))
    progress.on_event(Heartbeat(0, 20, "train", 3, 2.0, memory=(3 * 2**30, 16 * 2**30), cache=(5, 2)))
    progress.on_event(Heartbeat(1, 20, "train", 3, 2.0, memory=(8 * 2**30, 16 * 2**30), cache=(5, 2)))
    snapshot = progress.snapshot()
    assert [diagnosis.evidence for diagnosis in snapshot.diagnoses] == ["2.0 reads per step"]
    assert snapshot.memory == (8 * 2**30, 16 * 2**30)  # the fullest device
    assert snapshot.cache == (10, 4)
    _level, text = health(snapshot)
    assert "device memory 8.0 GiB of 16.0 GiB (50%)" in text and "compile cache 10 hits, 4 misses" in text


def test_a_resumed_runs_curve_continues_from_its_saved_history(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    progress.on_event(History(0, ((10, {"loss": 0.9}), (20, {"loss": 0.8}))))
    train_step(progress, clock, 30, 3, {"loss": 0.7})
    progress.on_event(History(0, ((25, {"loss": 0.75, "eval_loss": 0.8}),)))  # a later piece of the saved curve, after a row of this run
    train_step(progress, clock, 40, 3, {"loss": 0.6})
    snapshot = progress.snapshot()
    assert [row.step for row in snapshot.history] == [10, 20, 25, 30, 40]
    assert snapshot.metric_names == ("loss", "eval_loss")


def test_the_newest_checkpoint_is_shown_and_a_failed_check_stays_in_the_notices(progress: ProgressState, clock: FakeClock) -> None:
    start(progress)
    assert progress.snapshot().checkpoint is None
    progress.on_event(CheckpointSaved(0, 50, "/ck/checkpoint-50", 2.5, 0.25, 12_300_000, True, None, 0))
    assert progress.snapshot().checkpoint == "checkpoint at step 50 verified (11.7 MiB, 2.5s; the step waited 0.2s)"
    progress.on_event(CheckpointSaved(0, 100, "/ck/checkpoint-100", 2.5, 0.25, 0, False, "its weights equal the starting weights", 0))
    snapshot = progress.snapshot()
    assert snapshot.checkpoint is not None and "step 50" in snapshot.checkpoint  # still the newest good one
    assert snapshot.notices == (
        "the checkpoint at step 100 failed its check: its weights equal the starting weights; the previous verified one is kept",
    )


def test_chip_figures_go_on_their_rank_s_row_without_counting_as_a_word_from_it(progress: ProgressState, clock: FakeClock) -> None:
    from tpu_nb.kernel.progress.html_parts import workers_html
    from tpu_nb.wire.events import ChipFigures

    progress.on_event(WorkerStarted(0, 2, 100, "xla:0"))
    progress.on_event(WorkerStarted(1, 2, 101, "xla:1"))
    assert "Chip" not in workers_html(progress.snapshot())
    clock.advance(40.0)
    progress.on_event(ChipFigures(1, "TensorCore 97% · HBM 12.1/16.0 GiB"))
    progress.on_event(ChipFigures(5, "a rank never started: ignored"))
    rows = progress.snapshot().workers
    assert [row.chip for row in rows] == [None, "TensorCore 97% · HBM 12.1/16.0 GiB"]
    assert all(row.stale for row in rows)  # 40 s without a word from either worker
    assert "<th" in workers_html(progress.snapshot()) and "Chip" in workers_html(progress.snapshot())
    assert "TensorCore 97% · HBM 12.1/16.0 GiB" in workers_html(progress.snapshot())


def test_the_watchdog_s_report_stays_until_a_rank_in_it_moves(progress: ProgressState, clock: FakeClock) -> None:
    from tpu_nb.wire.stacks import RankPlace, StackReport

    progress.on_event(WorkerStarted(0, 1, 100, "xla:0"))
    report = StackReport("rank 0's step has not moved for 61s", (RankPlace(0, 100, 7, "In [3], line 4: q.get()", None, ()),), "v", "f")
    progress.on_event(report)
    progress.on_event(Heartbeat(0, 7, "train", 1, 1.0))
    assert progress.snapshot().stall is report
    progress.on_event(Heartbeat(0, 8, "train", 1, 1.0))
    assert progress.snapshot().stall is None
    assert "rank 0 moved again (step 8) after the watchdog's report" in progress.snapshot().notices
