"""tpu_nb.launch end to end: real forked workers on XLA:CPU."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from support.kernel import plain
from support.processes import STARTUP, descendants, interrupt_when, wait_until

import tpu_nb
from tpu_nb.kernel.endings.notebook_errors import LaunchRefused, TrainingInterrupted, TrainingTimedOut, WorkerDied, WorkerError


def xla_sum(scale: float) -> float:
    import torch
    import torch_xla

    return float((torch.ones(4, device=torch_xla.device()) * scale).sum().item())


def ordinal() -> int:
    import torch_xla.runtime as xr

    print(f"hello from {xr.global_ordinal()}")
    return int(xr.global_ordinal())


def divide_by_zero() -> None:
    numerator = 1
    numerator / 0


def kill_myself() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def sleep_forever() -> None:
    print("sleeping", flush=True)
    while True:
        time.sleep(0.1)


def test_launch_runs_on_an_xla_device_and_returns_rank_0s_value() -> None:
    assert tpu_nb.launch(xla_sum, 2.5) == 10.0
    assert not descendants(os.getpid())


def test_all_results_and_prefixed_output_of_every_rank(capsys: pytest.CaptureFixture[str]) -> None:
    assert tpu_nb.launch(ordinal, cores=2, all_results=True, all_ranks_output=True) == [0, 1]
    out = capsys.readouterr().out
    assert "hello from 0\n" in out
    assert "[rank 1] hello from 1\n" in out


def test_other_ranks_output_is_hidden_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    tpu_nb.launch(ordinal, cores=2)
    out = capsys.readouterr().out
    assert "hello from 0" in out
    assert "hello from 1" not in out


def test_a_worker_exception_carries_its_traceback() -> None:
    with pytest.raises(WorkerError) as raised:
        tpu_nb.launch(divide_by_zero)
    error = raised.value
    assert (error.rank, error.world_size, error.type_name) == (0, 1, "ZeroDivisionError")
    text = plain(str(error))  # coloured when an IPython shell exists in this process
    assert "rank 0 of 1 raised ZeroDivisionError: division by zero" in text
    assert "numerator / 0" in text
    assert "tpu_nb/launcher" not in text  # our own frames are not the user's problem
    assert not descendants(os.getpid())


def test_a_worker_killed_by_a_signal_is_reported_with_the_signal() -> None:
    with pytest.raises(WorkerDied, match="rank 0 was killed by SIGKILL.*ran out of memory"):
        tpu_nb.launch(kill_myself)
    assert not descendants(os.getpid())


def test_timeout_stops_every_worker() -> None:
    started = time.monotonic()
    with pytest.raises(TrainingTimedOut, match="timed out after 2"):
        tpu_nb.launch(sleep_forever, timeout=2)
    assert time.monotonic() - started < 15
    assert not descendants(os.getpid())


def interrupt_when_running(delays: tuple[float, ...]) -> None:
    main_pid = os.getpid()
    interrupt_when(lambda: bool(descendants(main_pid)), delays)


def train_until_stopped(flag: str) -> int:
    step = 0
    try:
        while True:
            step += 1
            time.sleep(0.05)
            tpu_nb.report(step=step)
            if step == 10:
                open(flag, "w").close()
    except tpu_nb.StopTraining:
        return step


def test_one_interrupt_stops_a_reporting_loop_at_a_step_boundary(tmp_path: Path) -> None:
    flag = tmp_path / "training"
    interrupt_when(flag.exists, (0.5,))
    # The timeout only bounds the test: on a loaded machine, the interrupt above waits up to STARTUP for the flag.
    stopped_at = tpu_nb.launch(train_until_stopped, str(flag), timeout=STARTUP + 60)
    assert stopped_at > 10  # it trained, then ended by itself at a step boundary
    assert not descendants(os.getpid())


def test_without_a_step_boundary_the_interrupt_falls_back_to_a_hard_stop() -> None:
    interrupt_when_running((3,))
    started = time.monotonic()
    with pytest.raises(TrainingInterrupted, match="every worker was stopped"):
        tpu_nb.launch(sleep_forever, stop_grace=1)
    assert time.monotonic() - started < 15
    assert wait_until(lambda: not descendants(os.getpid()), timeout=10)
    assert tpu_nb.launch(xla_sum, 1.0) == 4.0


def test_a_second_interrupt_stops_at_once() -> None:
    interrupt_when_running((3, 0.5))
    started = time.monotonic()
    with pytest.raises(TrainingInterrupted):
        tpu_nb.launch(sleep_forever, stop_grace=60)
    assert time.monotonic() - started < 15
    assert wait_until(lambda: not descendants(os.getpid()), timeout=10)


def test_a_second_launch_while_one_runs_is_refused() -> None:
    refused: list[BaseException] = []

    def launch_again() -> None:
        wait_until(lambda: bool(descendants(os.getpid())), timeout=STARTUP)
        try:
            tpu_nb.launch(xla_sum, 1.0)
        except LaunchRefused as error:
            refused.append(error)

    other = threading.Thread(target=launch_again)
    other.start()
    with pytest.raises(TrainingTimedOut):
        tpu_nb.launch(sleep_forever, timeout=8)
    other.join()
    [error] = refused
    assert "tpu_nb.launch(sleep_forever) is still running in this kernel" in str(error)


def test_bad_options_start_nothing() -> None:
    with pytest.raises(LaunchRefused, match="cores=0"):
        tpu_nb.launch(xla_sum, 1.0, cores=0)
    assert not descendants(os.getpid())


def test_a_background_handle_before_and_after_its_end() -> None:
    run = tpu_nb.launch(sleep_forever, background=True, progress=False)
    assert run.status == "running"
    with pytest.raises(RuntimeError, match="still running: use .wait"):
        _ = run.result
    with pytest.raises(TimeoutError, match="is still running after 0.1s"):
        run.wait(0.1)
    run.kill()
    assert run.status == "interrupted"
    with pytest.raises(TrainingInterrupted):
        run.wait()
    with pytest.raises(tpu_nb.RunEnded, match=r"run 'sleep_forever' has ended \(interrupted\): it has no stacks any more\."):
        run.stacks()
    assert not descendants(os.getpid())


def return_a_lock() -> object:
    return threading.Lock()


def test_a_return_value_that_cannot_come_back_is_an_error_that_says_why() -> None:
    with pytest.raises(
        tpu_nb.NotReturned, match=r"rank 0: the function returned a lock, which cannot be sent back from the worker \(cannot pickle"
    ):
        tpu_nb.launch(return_a_lock, progress=False)
    assert not descendants(os.getpid())
