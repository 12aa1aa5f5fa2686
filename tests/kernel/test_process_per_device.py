"""Launches in a world of one worker process per device, as on a TPU host (see tests/support/process_world.py).

Training with gradients averaged across processes, a graceful stop, a
failing rank, a killed rank, `--return` from rank 0, every process's
heartbeats and doctor, and nothing left running: with 4 and 8 processes.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from support.processes import STARTUP, descendants, wait_until

import tpu_nb
from tpu_nb.kernel.endings.notebook_errors import TrainingInterrupted, WorkerDied, WorkerError
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.run.followed_run import run_in_foreground
from tpu_nb.kernel.run.local_run import Run
from tpu_nb.wire.events import Event, Heartbeat, Stopping, WorkerStarted
from tpu_nb.workers.processes.programs import FunctionProgram


@pytest.fixture
def process_world() -> Iterator[None]:
    """`xmp.spawn` with a process per device, for this test (importing torch_xla here sets variables: restored)."""
    environ = dict(os.environ)
    import torch_xla._internal.pjrt as pjrt
    from support.process_world import install

    original = pjrt.run_multiprocess
    install()
    yield
    pjrt.run_multiprocess = original
    os.environ.clear()
    os.environ.update(environ)


def train_in_step(steps: int, stop_after: int | None = None) -> list[str]:
    """Each rank trains on its own batch; after every step, every rank's weights (their hash, via mesh_reduce) must agree."""
    import hashlib
    import time

    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    device, rank = torch_xla.device(), xr.global_ordinal()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(4, 8, generator=torch.Generator().manual_seed(rank))  # a different batch on every rank
    agreed = []
    for step in range(steps):
        loss = model(data.to(device)).pow(2).mean()
        loss.backward()
        xm.optimizer_step(optimizer)  # averages the gradients across the processes
        optimizer.zero_grad()
        torch_xla.sync()
        digest = hashlib.sha256(model.weight.detach().cpu().numpy().tobytes()).hexdigest()
        digests = xm.mesh_reduce("weights", digest, lambda found: sorted(set(found)))
        agreed.append(f"{step}:{len(digests)}")
        if stop_after is not None:
            time.sleep(0.05)
        tpu_nb.report(step=step, loss=loss)
    return agreed


@pytest.mark.parametrize("processes", [4, 8])
def test_gradients_are_averaged_so_every_process_holds_the_same_weights_after_every_step(process_world: None, processes: int) -> None:
    ranks = tpu_nb.launch(
        lambda: __import__("torch_xla.runtime").runtime.global_ordinal(), cores=processes, all_results=True, progress=False
    )
    assert ranks == list(range(processes))  # a process per device, each its own rank
    agreed = tpu_nb.launch(train_in_step, 3, cores=processes, progress=False)
    assert agreed == ["0:1", "1:1", "2:1"]  # one weight hash across every process, after every step
    assert not descendants(os.getpid())


def fail_on_rank_5() -> None:
    import time

    import torch_xla.runtime as xr

    if xr.global_ordinal() == 5:
        raise ValueError("rank 5 has a bad shard")
    time.sleep(600)  # the others would wait for it forever


def test_an_exception_on_rank_5_ends_every_process_with_its_traceback(process_world: None) -> None:
    with pytest.raises(WorkerError) as raised:
        tpu_nb.launch(fail_on_rank_5, cores=8, progress=False, timeout=120)
    assert raised.value.rank == 5 and "ValueError: rank 5 has a bad shard" in str(raised.value)
    assert "rank 5 of 8" in str(raised.value)
    assert wait_until(lambda: not descendants(os.getpid()), 10), descendants(os.getpid())


def kill_rank_3_mid_step() -> None:
    import time

    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    for _ in range(1000):
        if xr.global_ordinal() == 3:
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGKILL)
        xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device=torch_xla.device()))  # the others wait for rank 3 here


def test_a_rank_killed_mid_step_is_named_and_the_others_waiting_for_it_are_ended(process_world: None) -> None:
    with pytest.raises(WorkerDied) as died:
        tpu_nb.launch(kill_rank_3_mid_step, cores=4, progress=False, timeout=120)
    assert "the worker for rank 3 was killed by SIGKILL" in str(died.value)
    assert wait_until(lambda: not descendants(os.getpid()), 10), descendants(os.getpid())


class Events:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list[Any]:
        return [event for event in self.events if isinstance(event, kind)]


def test_a_graceful_stop_stops_every_process_at_the_same_step_with_their_heartbeats_and_doctors(process_world: None) -> None:
    events = Events()
    run = Run(FunctionProgram(train_in_step, (100_000, 0)), LaunchOptions(cores=4, progress=False, stop_grace=60), "stop", [events])

    def stop_once_every_rank_beats() -> None:
        if wait_until(lambda: {event.rank for event in events.of(Heartbeat) if (event.step or 0) >= 3} == {0, 1, 2, 3}, STARTUP):
            run.request_stop()

    threading.Thread(target=stop_once_every_rank_beats).start()
    ending = run_in_foreground(run)
    assert ending.status == "stopped", ending.text
    stops = {event.rank: event.step for event in events.of(Stopping)}
    assert set(stops) == {0, 1, 2, 3} and len(set(stops.values())) == 1, stops  # one step, agreed across processes
    assert {event.pid for event in events.of(WorkerStarted)} and len({event.pid for event in events.of(WorkerStarted)}) == 4
    assert {event.rank for event in events.of(Heartbeat)} == {0, 1, 2, 3}  # a heartbeat from every process
    assert {event.rank for event in events.of(Heartbeat) if event.compile_count > 0} == {0, 1, 2, 3}  # each process's compilations
    assert wait_until(lambda: not descendants(os.getpid()), 10), descendants(os.getpid())


def test_return_comes_from_rank_0_and_a_second_interrupt_ends_ranks_waiting_in_a_collective(
    process_world: None, ip: InteractiveShell
) -> None:
    cell = """%%tpu_train --cores 4 --no-progress --return model
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
model = torch.nn.Linear(2, 1).to(device)
with torch.no_grad():
    model.weight.fill_(float(xr.global_ordinal()))
"""
    with capture_output():
        ip.run_cell("import torch\nmodel = torch.nn.Linear(2, 1)")
        result = ip.run_cell(cell)
    assert result.success, result.error_in_exec
    assert float(ip.user_ns["model"].weight[0, 0]) == 0.0  # rank 0's, not another process's

    stuck = """%%tpu_train --cores 4 --no-progress --stop-grace 60
import time, torch_xla.core.xla_model as xm, torch_xla.runtime as xr
if xr.global_ordinal() == 2:
    time.sleep(600)  # rank 2 never reaches the collective the others wait in
print("waiting", flush=True)
xm.rendezvous("never complete")
"""
    interrupted = []

    def interrupt_twice() -> None:
        if wait_until(lambda: len(descendants(os.getpid())) >= 5, STARTUP):  # the supervisor and its 4 workers
            for _ in range(2):
                __import__("time").sleep(2)
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # type: ignore[arg-type]
                interrupted.append(True)

    threading.Thread(target=interrupt_twice).start()
    with capture_output():
        result = ip.run_cell(stuck)
    assert len(interrupted) == 2
    assert isinstance(result.error_in_exec, TrainingInterrupted)
    assert wait_until(lambda: not descendants(os.getpid()), 10), descendants(os.getpid())
