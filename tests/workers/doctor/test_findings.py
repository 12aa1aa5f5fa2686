"""The XLA doctor's rules, on readings as a worker's probe takes them."""

from __future__ import annotations

import linecache
import pickle
from dataclasses import replace

from tpu_nb.wire.channel import MAX_FRAME
from tpu_nb.wire.events import Heartbeat
from tpu_nb.workers.doctor.analysis_log import HOST_READ_CAUSE, Compilation, Frame
from tpu_nb.workers.doctor.findings import CPU_FALLBACK, HOST_READ, INPUT_BOUND, NO_EXECUTION, Doctor, Reading, shape_change

CELL = "/tmp/ipykernel_1/cell.py"
linecache.cache[CELL] = (
    0,
    None,
    ["for batch in loader:\n", "    loss = step(batch)\n", "    torch_xla.sync()\n", "    print(loss.item())\n"],
    CELL,
)
SYNC_LINE = Frame("<module>", CELL, 3)
READ_LINE = Frame("<module>", CELL, 4)
LIBRARY = Frame("sync", "/venv/lib/python3.11/site-packages/torch_xla/torch_xla.py", 87)

START = Reading(step=0, seconds=0.0, executions=0, host_reads=0, own_reads=0, fallbacks={}, input_wait=0.0)


def steps(doctor: Doctor, *readings: Reading) -> list[str]:
    """Examine the readings in order; the keys of every diagnosis said."""
    said = []
    for reading in readings:
        said += [diagnosis.key for diagnosis in doctor.examine(reading).diagnoses]
    return said


def at(step: int, **counts: object) -> Reading:
    """A reading at `step`, one second per step, one execution per step, plus `counts`."""
    return replace(START, step=step, seconds=float(step), executions=step, **counts)  # type: ignore[arg-type]


def test_a_clean_loop_gets_no_diagnosis() -> None:
    assert steps(Doctor(0), at(1), at(6), at(20, own_reads=3, host_reads=3, input_wait=0.5)) == []


def test_per_step_reads_beyond_tpu_nbs_own_are_host_syncs_with_their_line() -> None:
    doctor = Doctor(0)
    steps(doctor, at(1), at(6, host_reads=6))
    [diagnosis] = doctor.examine(at(16, host_reads=16 + 4, own_reads=4, read_places=((READ_LINE, 16),))).diagnoses
    assert diagnosis.key == HOST_READ
    assert diagnosis.evidence.startswith("1.0 reads of a device value per step (steps 6–16)")
    assert diagnosis.places == ("cell.py, line 4: print(loss.item()) (16 reads)",)
    assert "report(loss=...)" in diagnosis.fix


def test_the_same_evidence_is_said_once() -> None:
    doctor = Doctor(0)
    steps(doctor, at(1), at(6, host_reads=6))
    assert steps(doctor, at(16, host_reads=16)) == [HOST_READ]
    assert steps(doctor, at(16, host_reads=16)) == []


def test_ops_that_fall_back_to_the_cpu_each_step_are_named() -> None:
    doctor = Doctor(0)
    steps(doctor, at(1), at(6, fallbacks={"aten::nonzero": 6}))
    [diagnosis] = doctor.examine(at(16, fallbacks={"aten::nonzero": 16})).diagnoses
    assert diagnosis.key == CPU_FALLBACK
    assert "aten::nonzero (1.0 per step)" in diagnosis.evidence
    assert "torch.where" in diagnosis.fix  # nonzero's output size depends on the values


def test_waiting_for_batches_most_of_the_time_is_input_bound() -> None:
    doctor = Doctor(0)
    steps(doctor, at(1), at(6, input_wait=3.0))
    [diagnosis] = doctor.examine(at(16, input_wait=3.0 + 6.0)).diagnoses
    assert diagnosis.key == INPUT_BOUND
    assert "60% of the time" in diagnosis.evidence and "MpDeviceLoader" in diagnosis.fix


def test_steps_that_never_execute_are_said_at_once() -> None:
    doctor = Doctor(0)
    never = replace(START, step=1, seconds=0.0)
    assert steps(doctor, never, replace(never, step=3, seconds=1.0)) == []  # too early to tell
    assert steps(doctor, replace(never, step=8, seconds=2.5)) == [NO_EXECUTION]
    assert steps(Doctor(0), replace(never, step=1), at(8)) == []  # it executed


def test_a_new_graph_at_a_known_place_after_warm_up_is_explained_by_the_batch_shapes() -> None:
    doctor = Doctor(0)
    full = ((16, 128), (16,))
    compiled = Compilation("user torch_xla.sync", "graph-1", (LIBRARY, SYNC_LINE))
    assert doctor.examine(at(1, compilations=(compiled,), shapes=(full,))).causes == ()  # warm-up
    doctor.examine(at(6, shapes=(full,)))
    recompiled = replace(compiled, graph_hash="graph-2")
    [cause] = doctor.examine(at(12, compilations=(recompiled,), shapes=(full, ((13, 128), (13,))))).causes
    assert cause.reason == "input shape changed (batch 13 vs 16)"
    assert cause.place == "cell.py, line 3: torch_xla.sync()"
    assert "drop_last=True" in cause.fix


def test_a_value_read_in_the_middle_of_a_step_is_its_own_cause() -> None:
    doctor = Doctor(0)
    doctor.examine(at(6))
    read = Compilation(HOST_READ_CAUSE, "graph-3", (READ_LINE,))
    assert doctor.examine(at(12, compilations=(read,))).causes == ()  # the first graph there: expected once
    [cause] = doctor.examine(at(18, compilations=(replace(read, graph_hash="graph-4"),))).causes
    assert cause.place == "cell.py, line 4: print(loss.item())"
    assert "read" in cause.reason


def test_the_first_graph_at_a_new_place_after_warm_up_has_no_cause() -> None:
    doctor = Doctor(0)
    doctor.examine(at(6))
    evaluation = Compilation("user torch_xla.sync", "eval-graph", (LIBRARY, Frame("evaluate", CELL, 2)))
    assert doctor.examine(at(12, compilations=(evaluation,))).causes == ()


def test_shape_change_tells_batch_from_length() -> None:
    assert shape_change(()) is None
    assert shape_change((((16, 128),), ((16, 96),))) == ("length", 128, 96)
    assert shape_change((((16, 128),), ((5, 128),))) == ("batch", 16, 5)


def test_the_largest_findings_fit_one_event() -> None:
    long_file = "/tmp/" + "deeply_nested_module_name_" * 8 + ".py"
    linecache.cache[long_file] = (0, None, ["x" * 300 + "\n"] * 40, long_file)
    doctor = Doctor(0)
    doctor.examine(at(6))
    reads = tuple((Frame("f", long_file, line), 10**6) for line in range(1, 40))
    fallbacks = {f"aten::some_very_long_operator_name_{index}_with_overload": 10**6 for index in range(20)}
    shapes = (((16, 128),) * 32, ((13, 128),) * 32)
    compilations = tuple(Compilation(HOST_READ_CAUSE, f"graph-{line}", (Frame("f", long_file, line),)) for line in range(1, 40))
    doctor.examine(at(8, compilations=compilations))
    again = tuple(replace(compilation, graph_hash=compilation.graph_hash + "-2") for compilation in compilations)
    examination = doctor.examine(at(40, host_reads=10**6, fallbacks=fallbacks, read_places=reads, compilations=again, shapes=shapes))
    assert examination.causes and examination.diagnoses
    heartbeat = Heartbeat(0, 40, "train", 10**6, 1e6, examination.causes, (2**40, 2**40), (10**6, 10**6))
    for event in (heartbeat, *examination.diagnoses):
        assert len(pickle.dumps(event)) < MAX_FRAME // 2  # room to spare under the atomic write
