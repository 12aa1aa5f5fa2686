"""A rank's counts: numbers and host tensors added on the host, what was never given left out; counts on the device summed
there and read with the loss after their step ran, so the MFU of known FLOPs comes out of a real run's measured steps."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tpu_nb import launch
from tpu_nb.kernel.history.log import THROUGHPUT_CURVE, read_log
from tpu_nb.kernel.progress.throughput import STAND_IN_PEAK
from tpu_nb.workers.cell_api import reporting
from tpu_nb.workers.readings.step_counts import HOST_SAMPLES, HOST_TOKENS, StepCounts, counted_from


def test_numbers_and_host_tensors_are_added_on_the_host() -> None:
    counts = StepCounts()
    counts.add(tokens=torch.tensor([1, 1, 0]).sum(), samples=np.int64(3))
    counts.add(tokens=5, samples=2)
    values = counts.values()
    assert values == {HOST_TOKENS: 7, HOST_SAMPLES: 5} and all(type(value) is int for value in values.values())
    assert counted_from(values) == (7, 5)


def test_what_was_never_given_is_not_counted() -> None:
    counts = StepCounts()
    assert counts.values() == {} and counted_from(counts.values()) == (None, None)
    counts.add(samples=8)
    counts.add()
    assert counted_from(counts.values()) == (None, 8)


WIDTH, LAYERS, BATCH = 128, 3, 32
FLOPS_PER_TOKEN = 6 * WIDTH * WIDTH * LAYERS
"""Each row a token through bias-free Linear layers: 2 x width^2 multiply-adds a layer forward, twice that backward."""
WARM_UP, MEASURED = 6, 40


def linear_loop() -> dict[str, float]:
    """Linear layers whose FLOPs are known exactly, each step's tokens counted on the device; the loop's own measure of
    its tokens/s after warm-up, and the device values read by the host during those steps, and by tpu_nb itself."""
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(LAYERS)]).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, mask = torch.randn(BATCH, WIDTH).to(device), torch.ones(BATCH, dtype=torch.long).to(device)
    reporter = reporting.current()
    assert reporter is not None
    for step in range(1, WARM_UP + MEASURED + 1):
        if step == WARM_UP + 1:
            xm.wait_device_ops()
            started, reads, own = time.perf_counter(), met.counter_value("aten::_local_scalar_dense") or 0, reporter.own_reads
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        reporting.report(step=step, loss=loss, tokens=mask.sum(), samples=BATCH)  # a count the host never reads per step
        time.sleep(0.03)  # steps of a steady length: the loop's window and tpu_nb's measure the same rate
    xm.wait_device_ops()
    seconds = time.perf_counter() - started
    return {
        "tokens_per_second": MEASURED * BATCH / seconds,
        "host_reads": (met.counter_value("aten::_local_scalar_dense") or 0) - reads,
        "own_reads": reporter.own_reads - own,
    }


def test_mfu_from_the_measured_steps_of_known_flops_and_no_read_of_the_device_per_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    peak = 1e9  # stands in for a chip's: XLA:CPU has none
    monkeypatch.setenv(STAND_IN_PEAK, str(peak))
    measured = launch(linear_loop, flops_per_token=FLOPS_PER_TOKEN, run_log=str(tmp_path), progress=False)
    [record] = read_log(tmp_path).records
    assert record.tokens_per_second is not None and record.mfu is not None
    expected = measured["tokens_per_second"] * FLOPS_PER_TOKEN / peak  # one device: one chip
    assert record.mfu == pytest.approx(expected, rel=0.05)
    assert record.tokens_per_second == pytest.approx(measured["tokens_per_second"], rel=0.05)
    # The loss and the count are read after their step ran, a few times a second: what the host read is all tpu_nb's
    # (the doctor's own counters: reads beyond them stay at zero), far fewer than the steps.
    assert measured["host_reads"] == measured["own_reads"] and 0 < measured["host_reads"] < MEASURED / 2
    assert THROUGHPUT_CURVE in record.curves
