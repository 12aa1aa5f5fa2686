"""The XLA doctor in real forked workers on XLA:CPU: a loop that provokes each diagnosis, and a clean one that must not;
where a step's time goes, as the dashboard shows it."""

from __future__ import annotations

import inspect
import re
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import tpu_nb
from tpu_nb.kernel.endings.notebook_errors import WorkerError
from tpu_nb.kernel.launching import launch_observed
from tpu_nb.kernel.progress.state import ProgressState
from tpu_nb.kernel.progress.throughput import ThroughputMeter, TimeSplit
from tpu_nb.wire.events import Diagnosis, Event
from tpu_nb.workers.doctor.findings import HOST_READ, PER_SHAPE
from tpu_nb.workers.doctor.probe import CPU_CACHE_NOTE


class SlowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Each sample takes 10 ms to load: a batch of 16 waits 0.16 s."""

    def __init__(self, data: TensorDataset) -> None:
        self.data = data

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.01)
        return self.data[index]  # type: ignore[no-any-return]


def train(kind: str, epochs: int = 4, pause: float = 0.05) -> int:
    """A small hand-written loop; `kind` adds one mistake to it."""
    import torch_xla

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    samples = 16 * 20 + 13 if kind == "shapes" else 256
    data = TensorDataset(torch.randn(samples, 16), torch.randint(0, 2, (samples,)))
    loader = DataLoader(SlowDataset(data) if kind == "slow" else data, batch_size=16, drop_last=kind != "shapes")
    step = 0
    for _ in range(epochs):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            if kind == "fallback":
                loss = loss + model(x)[y > 0].sum() * 0  # boolean indexing: a dynamic shape
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if kind != "no-sync":
                torch_xla.sync()
            if kind == "item":
                print_me = loss.item()  # noqa: F841 - the per-step host sync under test
            if kind == "tokenize":  # Python work in the step, as tokenizing in the loop is: 30 ms of this thread's CPU
                busy_since = time.thread_time()
                while time.thread_time() - busy_since < 0.03:
                    pass
            step += 1
            tpu_nb.report(step=step, loss=loss)
            time.sleep(pause)
    return step


ITEM_LINE = next(
    number for number, line in enumerate(inspect.getsourcelines(train)[0], inspect.getsourcelines(train)[1]) if "loss.item()" in line
)
MOVE_LINE = next(
    number for number, line in enumerate(inspect.getsourcelines(train)[0], inspect.getsourcelines(train)[1]) if "x.to(device)" in line
)


def short_loop(batch_rows: str, read: bool) -> int:
    """40-60 quick steps (under a second, so no heartbeat sees warm-up end); `batch_rows` "cycling" makes 8-13 rows in turn."""
    import torch_xla

    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 8).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 40 if batch_rows == "cycling" else 60
    for step in range(1, steps + 1):
        rows = 8 + step % 6 if batch_rows == "cycling" else 16
        x = torch.randn(rows, 64).to(device)
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch_xla.sync()
        if read:
            print_me = loss.item()  # noqa: F841 - the per-step host sync under test
        tpu_nb.report(step=step, loss=loss)
    return steps


def line_of(function: object, text: str) -> int:
    lines, first = inspect.getsourcelines(function)  # type: ignore[arg-type]
    return next(number for number, line in enumerate(lines, first) if text in line)


@pytest.fixture
def diagnoses(monkeypatch: pytest.MonkeyPatch) -> list[Diagnosis]:
    """The Diagnosis events the kernel's progress takes in during a launch."""
    seen: list[Diagnosis] = []
    take_in = ProgressState.on_event

    def recording(state: ProgressState, event: Event) -> None:
        if isinstance(event, Diagnosis):
            seen.append(event)
        take_in(state, event)

    monkeypatch.setattr(ProgressState, "on_event", recording)
    return seen


def doctor_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith(("XLA doctor:", "warning:"))]


def split_of(*args: object) -> TimeSplit:
    """Launch `train(*args)`; where its steps' time went, as the dashboard's summary says (the run's steps after warm-up)."""
    meter = ThroughputMeter()
    launch_observed(train, args, {}, [meter])
    split = meter.overall().split
    assert split is not None
    return split


def test_a_clean_loop_shows_no_diagnosis(capsys: pytest.CaptureFixture[str]) -> None:
    split = split_of("clean")
    assert doctor_lines(capsys) == []
    assert split.share(split.input_wait) < 0.1 and split.share(split.host) < 0.5  # the step's sleep: waiting, not working


def test_a_per_step_item_is_a_host_sync_at_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    tpu_nb.launch(train, "item")
    [said] = doctor_lines(capsys)
    assert said.startswith("XLA doctor: Host syncs: 1.0 reads of a device value per step")
    assert f"test_probe.py, line {ITEM_LINE}: print_me = loss.item()" in said


def test_a_last_partial_batch_is_a_recompilation_with_its_shapes(capsys: pytest.CaptureFixture[str]) -> None:
    tpu_nb.launch(train, "shapes", 2, 0.1)  # heartbeats (1 s) see warm-up end well before the partial batch (step 21)
    [said] = doctor_lines(capsys)
    assert said.startswith("warning: XLA compiled again at 1 of ") and "first at step 21 (rank 0)" in said
    assert f"input shape changed (batch 13 vs 16) at test_probe.py, line {MOVE_LINE}: x, y = x.to(device), y.to(device)" in said
    assert "drop_last=True" in said


def test_boolean_indexing_is_a_cpu_fallback(capsys: pytest.CaptureFixture[str]) -> None:
    tpu_nb.launch(train, "fallback")
    fallback = [line for line in doctor_lines(capsys) if "CPU fallbacks" in line]
    assert len(fallback) == 1 and "aten::nonzero" in fallback[0] and "torch.where" in fallback[0]


def test_a_slow_data_loader_is_input_bound(capsys: pytest.CaptureFixture[str]) -> None:
    split = split_of("slow", 8, 0.0)
    [said] = doctor_lines(capsys)
    assert said.startswith("XLA doctor: Input-bound: the training thread waited for its next batch")
    assert "MpDeviceLoader" in said
    assert split.share(split.input_wait) > 0.5 and split.input_wait > 0.15  # a batch: 16 samples of 10 ms each


def test_python_work_in_every_step_is_host_bound(capsys: pytest.CaptureFixture[str]) -> None:
    split = split_of("tokenize", 8, 0.0)
    [said] = doctor_lines(capsys)
    assert said.startswith("XLA doctor: Host-bound: the training thread was busy on the host ")
    assert "a larger batch" in said and "tokenize in the notebook beforehand" in said and "MpDeviceLoader" in said
    assert split.share(split.host) > 0.8 and split.host > 0.03  # its CPU work, and its waits for a core on a busy machine


def test_a_loop_that_never_syncs_is_told_while_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    tpu_nb.launch(train, "no-sync", 3, 0.1)
    [said] = doctor_lines(capsys)
    assert said.startswith("XLA doctor: The loop never runs its graph: ")
    assert "torch_xla.sync()" in said and "MpDeviceLoader" in said


def test_the_doctor_can_be_turned_off(capsys: pytest.CaptureFixture[str]) -> None:
    tpu_nb.launch(train, "item", doctor=False)
    assert doctor_lines(capsys) == []


def out_of_memory() -> None:
    # What XLA:TPU raises when a program does not fit (the message as TPUs word it).
    raise RuntimeError(
        "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 17.55G of 15.48G hbm."
    )


def test_out_of_memory_names_the_sizes_and_the_fixes() -> None:
    with pytest.raises(WorkerError) as raised:
        tpu_nb.launch(out_of_memory)
    advice = raised.value.advice
    assert advice is not None and "used 17.55G of 15.48G HBM" in advice
    assert "--spmd" in advice and "bf16" in advice and "gradient checkpointing" in advice
    assert advice in raised.value._render_traceback_()


def test_the_compile_cache_is_skipped_on_xla_cpu_with_a_note(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    assert tpu_nb.launch(train, "clean", 1, 0.0, compile_cache=str(tmp_path)) == 16
    assert CPU_CACHE_NOTE in capsys.readouterr().err


def test_a_step_compiled_once_per_batch_size_in_warm_up_names_the_sizes_and_lines(
    capsys: pytest.CaptureFixture[str], diagnoses: list[Diagnosis]
) -> None:
    assert tpu_nb.launch(short_loop, "cycling", False) == 40
    last = diagnoses[-1]
    assert {diagnosis.key for diagnosis in diagnoses} == {PER_SHAPE}
    assert last.title == "Compiled once per input shape"
    shapes = "(9, 64), (10, 64), (11, 64), (12, 64), (13, 64), (8, 64)"  # in the order the steps made them
    assert last.evidence.startswith(f"the step's graph was compiled 6 times for 6 input shapes, {shapes}: ")
    move, sync = line_of(short_loop, "x = torch.randn"), line_of(short_loop, "torch_xla.sync()")
    assert last.places == (
        f"test_probe.py, line {sync}: torch_xla.sync() (6 graphs)",
        f"test_probe.py, line {move}: x = torch.randn(rows, 64).to(device) (6 shapes)",
    )
    warning, said = doctor_lines(capsys)
    assert said.startswith("XLA doctor: Compiled once per input shape: the step's graph was compiled 6 times")
    assert "drop_last=True" in said and "bucket" in said
    # The sixth size comes at step 6, after warm-up: the run is not called stable, and the line that moves it is named.
    assert warning.startswith("warning: XLA compiled again at 1 of 35 steps after warm-up (step 5), first at step 6 (rank 0)")
    assert "Why: input shapes moved to the device change ((9, 64), (10, 64), " in warning  # as many as seen by then
    assert f") at test_probe.py, line {move}: x = torch.randn(rows, 64).to(device). Fix: give every step the same input shapes" in warning


def test_a_short_run_with_a_per_step_item_is_a_host_sync(capsys: pytest.CaptureFixture[str], diagnoses: list[Diagnosis]) -> None:
    tpu_nb.launch(short_loop, "fixed", True)
    [diagnosis] = diagnoses  # said once, at the run's end
    assert (diagnosis.key, diagnosis.title) == (HOST_READ, "Host syncs")
    # one read per step; the figure is over the last few steps the heartbeat saw, and on a loaded machine its window
    # can end between a step and its read ("0.8 reads ... over 5 steps")
    reads = re.match(r"(\d\.\d) reads of a device value per step \(measured over ", diagnosis.evidence)
    assert reads is not None and 0.75 <= float(reads[1]) <= 1.25, diagnosis.evidence
    [place] = diagnosis.places
    assert place.startswith(f"test_probe.py, line {line_of(short_loop, 'loss.item()')}: print_me = loss.item()")
    assert place.endswith("(60 reads)")
    [said] = doctor_lines(capsys)
    assert said.startswith(f"XLA doctor: Host syncs: {reads[1]} reads of a device value per step (measured over ")


def test_a_short_clean_run_shows_no_diagnosis(capsys: pytest.CaptureFixture[str], diagnoses: list[Diagnosis]) -> None:
    assert tpu_nb.launch(short_loop, "fixed", False) == 60
    assert diagnoses == [] and doctor_lines(capsys) == []
