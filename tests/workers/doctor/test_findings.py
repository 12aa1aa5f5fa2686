"""The XLA doctor's rules, on readings as a worker's probe takes them."""

from __future__ import annotations

import linecache
import pickle
from dataclasses import replace

import pytest

from tpu_nb.wire.channel import MAX_FRAME
from tpu_nb.wire.events import Heartbeat
from tpu_nb.workers.doctor.analysis_log import HOST_READ_CAUSE, Compilation, Frame
from tpu_nb.workers.doctor.findings import (
    CPU_FALLBACK,
    HOST_BOUND,
    HOST_READ,
    INPUT_BOUND,
    NO_EXECUTION,
    PER_SHAPE,
    Findings,
    Reading,
    shape_change,
)
from tpu_nb.workers.doctor.trl_padding import TrlPadding

CELL = "/tmp/ipykernel_1/cell.py"
linecache.cache[CELL] = (
    0,
    None,
    [
        "for batch in loader:\n",
        "    loss = step(batch)\n",
        "    torch_xla.sync()\n",
        "    print(loss.item())\n",
        "    x = batch.to(device)\n",
    ],
    CELL,
)
SYNC_LINE = Frame("<module>", CELL, 3)
READ_LINE = Frame("<module>", CELL, 4)
MOVE_LINE = Frame("<module>", CELL, 5)
LIBRARY = Frame("sync", "/venv/lib/python3.11/site-packages/torch_xla/torch_xla.py", 87)

# The longest fix a TRL trainer gets: its batches change in size and length, padded to multiples of a small number.
BOTH_CHANGE = TrlPadding(
    "DPOConfig", pad_to_multiple_of=8, max_length=1024, padding_free=False, packing=False, batch_size=16, xla_multiple=128
)

START = Reading(step=0, seconds=0.0, executions=0, host_reads=0, own_reads=0, fallbacks={}, input_wait=0.0)


def steps(findings: Findings, *readings: Reading) -> list[str]:
    """Examine the readings in order; the keys of every diagnosis said."""
    said = []
    for reading in readings:
        said += [diagnosis.key for diagnosis in findings.examine(reading).diagnoses]
    return said


def at(step: int, **counts: object) -> Reading:
    """A reading at `step`, one second per step, one execution per step, with `counts` (and `seconds`) as given."""
    return replace(START, **{"step": step, "seconds": float(step), "executions": step, **counts})  # type: ignore[arg-type]


def test_a_clean_loop_gets_no_diagnosis() -> None:
    assert steps(Findings(0), at(1), at(6), at(20, own_reads=3, host_reads=3, input_wait=0.5)) == []


def test_per_step_reads_beyond_tpu_nbs_own_are_host_syncs_with_their_line() -> None:
    findings = Findings(0)
    steps(findings, at(1), at(6, host_reads=6))
    [diagnosis] = findings.examine(at(16, host_reads=16 + 4, own_reads=4, read_places=((READ_LINE, 16),))).diagnoses
    assert diagnosis.key == HOST_READ
    assert diagnosis.evidence.startswith("1.0 reads of a device value per step (measured over 10 steps (7–16) in 10.0 s: few steps")
    assert diagnosis.places == ("cell.py, line 4: print(loss.item()) (16 reads)",)
    assert "report(loss=...)" in diagnosis.fix


def test_the_same_evidence_is_said_once() -> None:
    findings = Findings(0)
    steps(findings, at(1), at(6, host_reads=6))
    assert steps(findings, at(16, host_reads=16)) == [HOST_READ]
    assert steps(findings, at(16, host_reads=16)) == []


def test_ops_that_fall_back_to_the_cpu_each_step_are_named() -> None:
    findings = Findings(0)
    steps(findings, at(1), at(6, fallbacks={"aten::nonzero": 6}))
    [diagnosis] = findings.examine(at(16, fallbacks={"aten::nonzero": 16})).diagnoses
    assert diagnosis.key == CPU_FALLBACK
    assert "aten::nonzero (1.0 per step)" in diagnosis.evidence
    assert "torch.where" in diagnosis.fix  # nonzero's output size depends on the values


def test_waiting_for_batches_most_of_the_time_is_input_bound() -> None:
    findings = Findings(0)
    steps(findings, at(1), at(6, input_wait=3.0))
    [diagnosis] = findings.examine(at(16, input_wait=3.0 + 6.0)).diagnoses
    assert diagnosis.key == INPUT_BOUND
    assert "60% of the time" in diagnosis.evidence and "MpDeviceLoader" in diagnosis.fix


def test_a_thread_busy_on_the_host_nearly_all_the_time_is_host_bound() -> None:
    findings = Findings(0)
    steps(findings, at(1, host=0.9), at(6, host=5.5))
    [diagnosis] = findings.examine(at(16, host=5.5 + 9.0)).diagnoses  # 10 one-second steps, 0.9 s of each on the host
    assert diagnosis.key == HOST_BOUND
    assert "busy on the host 90% of the time (0.900 s of each 1.000 s step" in diagnosis.evidence
    assert "a larger batch" in diagnosis.fix and "MpDeviceLoader" in diagnosis.fix
    assert steps(Findings(0), at(1, host=0.5), at(6, host=3.0), at(16, host=3.0 + 7.0)) == []  # 70%: the device keeps up
    assert steps(Findings(0), at(1), at(6), at(16)) == []  # no reading of the thread's time: nothing said


def test_steps_that_never_execute_are_said_at_once() -> None:
    findings = Findings(0)
    never = replace(START, step=1, seconds=0.0)
    assert steps(findings, never, replace(never, step=3, seconds=1.0)) == []  # too early to tell
    assert steps(findings, replace(never, step=8, seconds=2.5)) == [NO_EXECUTION]
    assert steps(Findings(0), replace(never, step=1), at(8)) == []  # it executed


def test_a_new_graph_at_a_known_place_after_warm_up_is_explained_by_the_batch_shapes() -> None:
    findings = Findings(0)
    full = ((16, 128), (16,))
    compiled = Compilation("user torch_xla.sync", "graph-1", (LIBRARY, SYNC_LINE))
    assert findings.examine(at(1, compilations=(compiled,), shapes=(full,))).causes == ()  # warm-up
    findings.examine(at(6, shapes=(full,)))
    recompiled = replace(compiled, graph_hash="graph-2")
    [cause] = findings.examine(at(12, compilations=(recompiled,), shapes=(full, ((13, 128), (13,))))).causes
    assert cause.reason == "input shape changed (batch 13 vs 16)"
    assert cause.place == "cell.py, line 3: torch_xla.sync()"
    assert "drop_last=True" in cause.fix


def test_a_value_read_in_the_middle_of_a_step_is_its_own_cause() -> None:
    findings = Findings(0)
    findings.examine(at(6))
    read = Compilation(HOST_READ_CAUSE, "graph-3", (READ_LINE,))
    assert findings.examine(at(12, compilations=(read,))).causes == ()  # the first graph there: expected once
    [cause] = findings.examine(at(18, compilations=(replace(read, graph_hash="graph-4"),))).causes
    assert cause.place == "cell.py, line 4: print(loss.item())"
    assert "read" in cause.reason


def test_the_first_graph_at_a_new_place_after_warm_up_has_no_cause() -> None:
    findings = Findings(0)
    findings.examine(at(6))
    evaluation = Compilation("user torch_xla.sync", "eval-graph", (LIBRARY, Frame("evaluate", CELL, 2)))
    assert findings.examine(at(12, compilations=(evaluation,))).causes == ()


def test_shape_change_tells_batch_from_length() -> None:
    assert shape_change(()) is None
    assert shape_change((((16, 128),), ((16, 96),))) == ("length", 128, 96)
    assert shape_change((((16, 128),), ((5, 128),))) == ("batch", 16, 5)


@pytest.mark.parametrize("padding", [None, BOTH_CHANGE], ids=["any loop", "a TRL trainer"])
def test_the_largest_findings_fit_one_event(padding: TrlPadding | None) -> None:
    long_file = "/tmp/" + "deeply_nested_module_name_" * 8 + ".py"
    linecache.cache[long_file] = (0, None, ["x" * 300 + "\n"] * 40, long_file)
    findings = Findings(0, padding=padding)
    findings.examine(at(6))
    reads = tuple((Frame("f", long_file, line), 10**6) for line in range(1, 40))
    fallbacks = {f"aten::some_very_long_operator_name_{index}_with_overload": 10**6 for index in range(20)}
    shapes = (((16, 128),) * 32, ((13, 96),) * 32)  # batch and length both change
    compilations = tuple(Compilation(HOST_READ_CAUSE, f"graph-{line}", (Frame("f", long_file, line),)) for line in range(1, 40))
    findings.examine(at(8, compilations=compilations))
    again = tuple(replace(compilation, graph_hash=compilation.graph_hash + "-2") for compilation in compilations)
    examination = findings.examine(at(40, host_reads=10**6, fallbacks=fallbacks, read_places=reads, compilations=again, shapes=shapes))
    assert examination.causes and examination.diagnoses
    heartbeat = Heartbeat(0, 40, "train", 10**6, 1e6, examination.causes, (2**40, 2**40), (10**6, 10**6))
    for event in (heartbeat, *examination.diagnoses):
        assert len(pickle.dumps(event)) < MAX_FRAME // 2  # room to spare under the atomic write


def test_a_short_run_is_judged_at_its_end_from_before_warm_up_and_called_rough() -> None:
    findings = Findings(0)
    steps(findings, START, replace(START, step=2, seconds=1.0, host_reads=2))  # the last heartbeat saw step 2
    end = at(60, seconds=2.8, host_reads=60, read_places=((READ_LINE, 60),))
    assert findings.examine(end).diagnoses == ()  # mid-run, a later heartbeat would see past warm-up
    [diagnosis] = findings.examine(end, final=True).diagnoses
    assert diagnosis.key == HOST_READ
    assert diagnosis.evidence.startswith(
        "1.0 reads of a device value per step (measured over 58 steps (3–60) in 1.8 s, warm-up included: a short run, "
        "so the figure is rough)"
    )
    assert diagnosis.places == ("cell.py, line 4: print(loss.item()) (60 reads)",)


def test_the_end_of_a_run_is_not_compared_with_itself() -> None:
    findings = Findings(0)
    steps(findings, START, at(3))
    [diagnosis] = findings.examine(at(60, host_reads=60), final=True).diagnoses  # the first reading past warm-up
    assert "measured over 57 steps (4–60)" in diagnosis.evidence


def test_a_long_measure_after_warm_up_is_stated_as_it_stands() -> None:
    findings = Findings(0)
    steps(findings, START, at(6, host_reads=6))
    [diagnosis] = findings.examine(at(61, seconds=7.8, host_reads=61), final=True).diagnoses
    assert "(measured over 55 steps (7–61) in 1.8 s)" in diagnosis.evidence


def test_a_short_clean_run_gets_no_diagnosis() -> None:
    one_off = {"aten::_copy_from": 2}  # setting up the first step: not per step
    findings = Findings(0)
    steps(findings, START)
    assert findings.examine(at(60, own_reads=1, host_reads=1, fallbacks=one_off, input_wait=0.1), final=True).diagnoses == ()


def test_a_short_run_names_ops_that_fall_back_every_step() -> None:
    findings = Findings(0)
    steps(findings, START)
    [diagnosis] = findings.examine(at(60, fallbacks={"aten::nonzero": 60, "aten::_copy_from": 2}), final=True).diagnoses
    assert diagnosis.key == CPU_FALLBACK
    assert "aten::nonzero (1.0 per step)" in diagnosis.evidence and "_copy_from" not in diagnosis.evidence
    assert "a short run, so the figure is rough" in diagnosis.evidence


def graphs(first: int, last: int, inputs: int = 13) -> tuple[Compilation, ...]:
    """The step's graph at the sync line, once per step from `first` to `last` (one shape each)."""
    return tuple(Compilation("user torch_xla.sync", f"graph-{step}", (LIBRARY, SYNC_LINE), inputs, 9) for step in range(first, last + 1))


CYCLING = tuple((8 + step % 6, 64) for step in range(6))


def test_a_step_compiled_once_per_input_shape_in_warm_up_names_the_shapes_and_lines() -> None:
    findings = Findings(0)
    step_one = Compilation("user torch_xla.sync", "graph-0", (LIBRARY, SYNC_LINE), 8, 9)  # before the optimizer's state
    steps(findings, START, at(1, compilations=(step_one,), transfers=((MOVE_LINE, CYCLING[:1]),)))
    examination = findings.examine(at(40, compilations=graphs(2, 6), transfers=((MOVE_LINE, CYCLING),)), final=True)
    # Graphs alike in inputs and outputs differ in sizes: explained even in warm-up (the kernel shows it if a later step compiles).
    [cause] = examination.causes
    assert cause.reason.startswith("input shapes moved to the device change ((8, 64), (9, 64), ")
    assert cause.place == "cell.py, line 5: x = batch.to(device)"
    [diagnosis] = examination.diagnoses
    assert (diagnosis.key, diagnosis.title) == (PER_SHAPE, "Compiled once per input shape")
    assert diagnosis.evidence.startswith(
        "the step's graph was compiled 5 times for 6 input shapes, (8, 64), (9, 64), (10, 64), (11, 64), (12, 64), (13, 64): "
    )
    assert diagnosis.places == ("cell.py, line 3: torch_xla.sync() (5 graphs)", "cell.py, line 5: x = batch.to(device) (6 shapes)")
    assert "bucket" in diagnosis.fix and "drop_last=True" in diagnosis.fix and "max_length" in diagnosis.fix


def test_batch_shapes_from_a_data_loader_are_named_without_a_line() -> None:
    findings = Findings(0)
    batches = (((16, 128), (16,)), ((16, 96), (16,)), ((16, 64), (16,)))
    [diagnosis] = findings.examine(at(3, compilations=graphs(1, 3), shapes=batches)).diagnoses
    assert "compiled 3 times for 3 input shapes, (16, 128), (16, 96), (16, 64)" in diagnosis.evidence
    assert diagnosis.places == ("cell.py, line 3: torch_xla.sync() (3 graphs)",)


def test_graphs_that_add_the_optimizers_state_are_not_per_shape() -> None:
    findings = Findings(0)
    first, second = graphs(1, 1, inputs=8)[0], graphs(2, 2, inputs=13)[0]  # alike in place, not in inputs
    two_calls = ((MOVE_LINE, ((16, 64), (16,))),)  # a helper that moves x and y
    assert steps(findings, START, at(60, compilations=(first, second), transfers=two_calls)) == []


def test_a_shape_that_changes_after_warm_up_is_left_to_the_recompilation_warning() -> None:
    findings = Findings(0)
    steps(findings, START, at(1, compilations=graphs(1, 1)), at(6))
    partial = ((MOVE_LINE, ((16, 64), (13, 64))),)
    examination = findings.examine(at(21, compilations=graphs(21, 21), transfers=partial))
    assert examination.diagnoses == () and len(examination.causes) == 1


MADE_CELL = "/tmp/ipykernel_1/made-on-device.py"
linecache.cache[MADE_CELL] = (
    0,
    None,
    [
        "%%tpu_train\n",
        "for step in range(1, 41):\n",
        "    x = torch.randn(4 + step % 6, 8, device=device)\n",
        "    keep = (x[:, 0] > 0).nonzero().squeeze(1)\n",
        "    loss = layer(x[keep]).mean()\n",
        "    torch_xla.sync()\n",
    ],
    MADE_CELL,
)
MADE_SYNC = Frame("<module>", MADE_CELL, 6)


def made_graphs(first: int, last: int) -> tuple[Compilation, ...]:
    """The step's graph at the made-on-device cell's sync line, alike in inputs and outputs, one per size."""
    return tuple(Compilation("user torch_xla.sync", f"made-{step}", (LIBRARY, MADE_SYNC), 6, 4) for step in range(first, last + 1))


def test_a_size_made_on_the_device_is_named_by_its_line_even_in_warm_up() -> None:
    findings = Findings(0)
    assert findings.examine(at(1, compilations=made_graphs(1, 1))).causes == ()  # the first graph there: expected once
    [cause] = findings.examine(at(3, compilations=made_graphs(2, 3))).causes
    assert cause.reason == "a tensor made on the device at a size that changes between steps"
    assert cause.place == "made-on-device.py, line 3: x = torch.randn(4 + step % 6, 8, device=device)"
    assert "fixed size" in cause.fix


def test_a_data_dependent_op_is_named_by_its_line() -> None:
    findings = Findings(0)
    read = Compilation(HOST_READ_CAUSE, "read-x", (Frame("<module>", MADE_CELL, 4),), 1, 1)  # .nonzero() needs x's values
    findings.examine(at(1, compilations=(read, *made_graphs(1, 1)), fallbacks={"aten::nonzero": 1}))
    [cause] = findings.examine(at(2, compilations=made_graphs(2, 2), fallbacks={"aten::nonzero": 2})).causes
    assert cause.reason == "a data-dependent op (.nonzero()): its result's size depends on the values"
    assert cause.place == "made-on-device.py, line 4: keep = (x[:, 0] > 0).nonzero().squeeze(1)"
    assert "torch.where" in cause.fix


def test_a_step_compiled_once_per_size_it_makes_in_warm_up_is_a_finding_with_its_lines() -> None:
    findings = Findings(0)
    [diagnosis] = findings.examine(at(4, compilations=made_graphs(1, 4)), final=True).diagnoses
    assert (diagnosis.key, diagnosis.title) == (PER_SHAPE, "Compiled once per size")
    assert diagnosis.evidence.startswith("the step's graph was compiled 4 times with the same inputs and outputs: sizes made in the step")
    assert diagnosis.places == (
        "made-on-device.py, line 6: torch_xla.sync() (4 graphs)",
        "made-on-device.py, line 3: x = torch.randn(4 + step % 6, 8, device=device) (made on the device)",
        "made-on-device.py, line 4: keep = (x[:, 0] > 0).nonzero().squeeze(1) (data-dependent size)",
    )


def test_graphs_alike_without_a_line_of_the_users_are_no_evidence_in_warm_up() -> None:
    """A Trainer's evaluation gathers outputs of several sizes inside the library: no cause, no finding."""
    findings = Findings(0)
    gathered = tuple(Compilation("torch_xla.sync in parallel loader", f"gather-{n}", (LIBRARY,), 2, 1) for n in range(4))
    examination = findings.examine(at(3, compilations=gathered))
    assert examination.causes == () and examination.diagnoses == ()


# A TRL trainer (SFTTrainer, DPOTrainer) makes and pads its batches itself: its user owns only the config's line
# (the lines themselves: test_trl_padding.py).
SFT_TO_LONGEST = TrlPadding(
    "SFTConfig", pad_to_multiple_of=None, max_length=32, padding_free=False, packing=False, batch_size=8, xla_multiple=32
)


def test_a_trl_trainer_compiled_once_per_length_is_told_its_configs_line() -> None:
    lengths = tuple(((8, length), (8, length)) for length in (22, 23, 21, 19))
    for padding, fix in ((SFT_TO_LONGEST, "SFTConfig(pad_to_multiple_of=32): "), (None, "give every step the same input shapes")):
        [diagnosis] = Findings(0, padding=padding).examine(at(4, compilations=graphs(1, 4), shapes=lengths)).diagnoses
        assert diagnosis.key == PER_SHAPE and diagnosis.fix.startswith(fix)
        assert ("tokenizer(..., padding='max_length'" in diagnosis.fix) == (padding is None)  # any other loop: as before


def test_a_trl_trainers_recompilation_for_a_new_length_names_its_configs_line() -> None:
    findings = Findings(0, padding=SFT_TO_LONGEST)
    full = ((8, 22), (8, 22))
    compiled = Compilation("user torch_xla.sync", "graph-1", (LIBRARY, SYNC_LINE))
    findings.examine(at(1, compilations=(compiled,), shapes=(full,)))
    findings.examine(at(6, shapes=(full,)))
    [cause] = findings.examine(at(12, compilations=(replace(compiled, graph_hash="graph-2"),), shapes=(full, ((8, 24), (8, 24))))).causes
    assert cause.reason == "input shape changed (length 24 vs 22)"
    assert cause.fix.startswith("SFTConfig(pad_to_multiple_of=32): ")


def test_an_input_seen_in_many_more_shapes_than_the_step_compiled_is_not_why_it_compiles() -> None:
    """TRL's packed batches padded to one length still carry the sequences' boundaries (cu_seq_lens), one size per
    batch, which the step's graph does not use: 12 shapes, 2 graphs (measured on XLA:CPU)."""
    boundaries = tuple(((1, 256), (count,)) for count in (25, 21, 17, 23, 29, 31))
    assert Findings(0).examine(at(6, compilations=graphs(1, 2), shapes=boundaries), final=True).diagnoses == ()
