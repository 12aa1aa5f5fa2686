"""A run's speed from its events: tokens/s and samples/s over training only, MFU against the run's chips, the step's time split."""

from __future__ import annotations

import pytest
from support.platforms import MakeSystem

from tpu_nb.kernel.progress.recompilation import WARMUP_STEPS
from tpu_nb.kernel.progress.throughput import (
    NO_FLOPS_PER_TOKEN,
    OFF_TPU,
    RATE_WINDOW_SECONDS,
    STAND_IN_PEAK,
    Basis,
    Throughput,
    ThroughputMeter,
    host_basis,
)
from tpu_nb.runtime import detect
from tpu_nb.wire.events import Counted, Heartbeat, Progress, TimeSpent


def report(meter: ThroughputMeter, step: int, seconds: float, tokens: int | None, samples: int | None = None, **fields: object) -> None:
    meter.on_event(Progress(0, step, {}, phase="train", counted=Counted(seconds, tokens, samples, **fields)))  # type: ignore[arg-type]


def test_each_generation_is_measured_against_its_chips_peak(make_system: MakeSystem) -> None:
    kaggle = host_basis(detect(make_system("kaggle_v5e_8")), 8, 1e9, environ={})
    assert kaggle == Basis(8, 197e12, None, 1e9)
    assert host_basis(detect(make_system("kaggle_v5e_8")), 2, None, environ={}).chips == 2  # --cores 2
    v3 = detect(make_system("colab_v2_8", environ={"TPU_ACCELERATOR_TYPE": "v3-8"}))
    assert host_basis(v3, 8, None, environ={}) == Basis(4, 123e12, None)  # two TensorCores (XLA devices) a chip
    v4 = host_basis(detect(make_system("cloud_tpu_vm_v4_8")), 4, None, environ={})
    assert (v4.chips, v4.peak) == (4, 275e12)


def test_without_a_known_peak_the_basis_says_why(make_system: MakeSystem) -> None:
    unknown = host_basis(detect(make_system("colab_v2_8")), 8, None, environ={})
    assert unknown.peak is None and unknown.no_peak is not None and "TPU_ACCELERATOR_TYPE" in unknown.no_peak
    assert host_basis(detect(make_system("cpu_laptop")), 1, None, environ={}) == Basis(1, None, OFF_TPU)


def test_a_stand_in_peak_measures_mfu_off_tpu_for_tests(make_system: MakeSystem) -> None:
    cpu = detect(make_system("cpu_laptop"))
    assert host_basis(cpu, 4, 100.0, environ={STAND_IN_PEAK: "2e9"}) == Basis(4, 2e9, None, 100.0)
    for wrong in ("fast", "0", "-1", "inf"):
        basis = host_basis(cpu, 4, None, environ={STAND_IN_PEAK: wrong})
        assert basis.peak is None and basis.no_peak == f"no MFU: {STAND_IN_PEAK}={wrong!r} is not a positive number of FLOP/s"


def test_tokens_and_samples_per_second_and_mfu_over_the_live_window() -> None:
    meter = ThroughputMeter(Basis(chips=4, peak=1e6, no_peak=None, flops_per_token=200.0))
    for step in range(1, 101):  # 0.5 s steps of 1,000 tokens in 8 samples
        report(meter, step, 100.0 + step * 0.5, step * 1000, step * 8)
    live = meter.live()
    assert live.tokens_per_second == pytest.approx(2000.0) and live.samples_per_second == pytest.approx(16.0)
    assert live.tokens_per_second_per_chip == pytest.approx(500.0)
    assert live.mfu == pytest.approx(2000.0 * 200.0 / (4 * 1e6)) and live.no_mfu is None
    for step in range(101, 201):  # then 0.25 s steps, for longer than the window
        report(meter, step, 150.0 + (step - 100) * 0.25, step * 1000, step * 8)
    assert RATE_WINDOW_SECONDS < 100 * 0.25
    assert meter.live().tokens_per_second == pytest.approx(4000.0)
    assert meter.overall().tokens_per_second == pytest.approx((200 - WARMUP_STEPS) * 1000 / (175.0 - (100.0 + WARMUP_STEPS * 0.5)))


def test_warm_up_is_left_out_of_a_runs_figure_unless_nothing_came_after_it() -> None:
    meter = ThroughputMeter()
    report(meter, 1, 10.0, 100)
    report(meter, 3, 40.0, 300)  # steps 2-3 compiled: 30 s
    assert meter.overall().tokens_per_second == pytest.approx(200 / 30)  # all there is: rough, but said
    report(meter, WARMUP_STEPS, 41.0, WARMUP_STEPS * 100)
    report(meter, 20, 42.5, 2000)
    assert meter.overall().tokens_per_second == pytest.approx((2000 - WARMUP_STEPS * 100) / 1.5)


def test_an_evaluation_between_two_training_reports_is_not_training_time() -> None:
    meter = ThroughputMeter()
    for step in range(WARMUP_STEPS, WARMUP_STEPS + 5):
        report(meter, step, float(step), step * 100)
    meter.on_event(Progress(0, WARMUP_STEPS + 4, {}, phase="eval"))
    for step in range(WARMUP_STEPS + 5, WARMUP_STEPS + 10):  # after a 60 s evaluation
        report(meter, step, 60.0 + step, step * 100)
    assert meter.overall().tokens_per_second == pytest.approx(100.0)
    assert meter.live().tokens_per_second == pytest.approx(100.0)


def test_mfu_uses_the_models_flops_per_token_unless_the_user_gave_some() -> None:
    models = ThroughputMeter(Basis(chips=1, peak=1e6, no_peak=None))
    users = ThroughputMeter(Basis(chips=1, peak=1e6, no_peak=None, flops_per_token=50.0))
    for meter in (models, users):
        report(meter, 6, 1.0, 600, flops_per_token=100.0)
        report(meter, 7, 2.0, 700, flops_per_token=100.0)
    assert models.overall().mfu == pytest.approx(100 * 100.0 / 1e6)
    assert users.overall().mfu == pytest.approx(100 * 50.0 / 1e6)


def test_without_mfu_the_reason_is_given_only_where_tokens_were_counted() -> None:
    no_flops = ThroughputMeter(Basis(chips=1, peak=1e6, no_peak=None))
    off_tpu = ThroughputMeter(Basis(chips=1, peak=None, no_peak=OFF_TPU, flops_per_token=10.0))
    samples_only = ThroughputMeter(Basis(chips=1, peak=None, no_peak=OFF_TPU, flops_per_token=10.0))
    for step in (6, 7):
        report(no_flops, step, float(step), step * 10)
        report(off_tpu, step, float(step), step * 10)
        report(samples_only, step, float(step), None, step * 2)
    assert (no_flops.live().mfu, no_flops.live().no_mfu) == (None, NO_FLOPS_PER_TOKEN)
    assert (off_tpu.live().mfu, off_tpu.live().no_mfu) == (None, OFF_TPU)
    assert samples_only.live().tokens_per_second is None and samples_only.live().samples_per_second == pytest.approx(2.0)
    assert samples_only.live().no_mfu is None
    assert ThroughputMeter().live() == Throughput()  # nothing counted, nothing measured: nothing to show


def test_the_step_is_split_into_input_wait_device_and_host_averaged_over_the_ranks() -> None:
    meter = ThroughputMeter()
    for beat in range(30):  # one heartbeat a second, 10 steps each: 0.1 s steps
        seconds, steps = 100.0 + beat, beat * 10
        meter.on_event(Heartbeat(0, steps, "train", 1, 1.0, spent=TimeSpent(seconds, steps, 0.02 * steps, 0.03 * steps)))
        meter.on_event(Heartbeat(1, steps, "train", 1, 1.0, spent=TimeSpent(seconds, steps, 0.0, 0.05 * steps)))
    split = meter.live().split
    assert split is not None
    assert (split.step, split.input_wait, split.host) == pytest.approx((0.1, 0.01, 0.04))
    assert split.device == pytest.approx(0.05) and split.share(split.device) == pytest.approx(0.5)
    assert meter.overall().split == split  # steady from its start


def test_a_split_is_measured_after_warm_up_once_there_is_a_reading_past_it() -> None:
    meter = ThroughputMeter()
    readings = [TimeSpent(100.0, 0, 0.0, 0.0), TimeSpent(130.0, 1, 0.0, 29.0), TimeSpent(131.0, 11, 0.0, 29.1)]
    for spent in readings:  # the first step compiled for 30 s, on the host
        meter.on_event(Heartbeat(0, spent.steps, "train", 1, 1.0, spent=spent))
    rough = meter.overall().split
    assert rough is not None and rough.step == pytest.approx(31.0 / 11)  # no reading past warm-up but the last: all of it
    meter.on_event(Heartbeat(0, 21, "train", 1, 1.0, spent=TimeSpent(132.0, 21, 0.5, 29.2)))
    split = meter.overall().split
    assert split is not None and (split.step, split.input_wait, split.host) == pytest.approx((0.1, 0.05, 0.01))
