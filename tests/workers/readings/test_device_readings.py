"""A worker's readings of its device stack: values on a chip copied to the host, and the steps that compiled."""

from __future__ import annotations

import torch

from tpu_nb.workers.readings.device_readings import MOST_COMPILED_RUNS, CompiledSteps, DeviceReads


def test_device_reads_leave_plain_numbers_and_other_devices_alone() -> None:
    reads = DeviceReads("tpu", lambda: None)  # type: ignore[arg-type, return-value]
    assert not reads.wants({"loss": 0.5, "grad_norm": torch.tensor(1.0)})  # a CPU tensor is not on the chip


def test_each_step_that_compiled_is_kept_as_runs_until_a_heartbeat_takes_them() -> None:
    compiled = CompiledSteps()
    counts = {0: 0, 1: 1, 2: 2, 3: 2, 4: 3, 5: 4, 6: 5, 7: 5, 8: 6}  # steps 1, 2, 4, 5, 6, 8 compiled
    for step, count in counts.items():
        compiled.boundary(0, step, count, training=True)
    assert compiled.take(0) == ((1, 2), (4, 6), (8, 8))
    assert compiled.take(0) == ()


def test_the_first_boundary_an_evaluation_and_a_repeated_step_are_not_a_step_that_compiled() -> None:
    compiled = CompiledSteps()
    compiled.boundary(0, 10, 5, training=True)  # what compiled before the first boundary: the run's start
    compiled.boundary(0, 10, 9, training=False)  # an evaluation at step 10 compiles its own graphs
    compiled.boundary(0, 10, 10, training=True)  # back to training at the same step (a Trainer's on_evaluate, on_train_end)
    compiled.boundary(0, 11, 10, training=True)
    assert compiled.take(0) == ()
    compiled.boundary(0, 12, 11, training=True)
    assert compiled.take(0) == ((12, 12),)


def test_a_heartbeat_carries_a_bounded_number_of_runs_and_the_rest_waits() -> None:
    compiled = CompiledSteps()
    for step in range(0, 200, 2):  # every other step compiles: one run each
        compiled.boundary(0, step, step, training=True)
    first = compiled.take(0)
    assert len(first) == MOST_COMPILED_RUNS and first[0] == (2, 2)
    taken = list(first)
    while runs := compiled.take(0):
        taken += runs
    assert taken == [(step, step) for step in range(2, 200, 2)]
