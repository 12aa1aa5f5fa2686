"""The supervisor: a process forked from the kernel that runs `xmp.spawn`.

It leads its own process group, so the kernel can end the supervisor, every
worker and anything they started (DataLoader workers) with one `killpg`,
and so Jupyter's SIGINT to the kernel's group never reaches a worker
half-way through an XLA call. If the kernel dies, the kernel's death signal
ends the supervisor and the supervisor's ends each worker.
"""

from __future__ import annotations

import ctypes
import functools
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

from tpu_nb.wire.environment import WorkerEnvironment
from tpu_nb.wire.supervisor_report import SupervisorReport, save_imported_modules, save_report
from tpu_nb.workers.cell_output.printed_output import capture_output
from tpu_nb.workers.processes import worker
from tpu_nb.workers.processes.chip_ranks import ChipRun, serve_rendezvous

_PR_SET_PDEATHSIG = 1

FORK_WARNING = re.compile(r"This process \(pid=\d+\) is multi-threaded, use of fork\(\) may lead to deadlocks in the child\.")
"""What Python 3.12+ warns on `os.fork()` in a multi-threaded process (see `tpu_nb.kernel.run.forking`)."""


@functools.cache
def _prctl() -> Callable[..., int]:
    return ctypes.CDLL(None, use_errno=True).prctl


def prepare_to_fork() -> None:
    """Look up what the child needs from libc in the kernel, before forking.

    In the child, the lookup could wait forever on the dynamic loader's lock
    if another kernel thread held it at the fork (see `tpu_nb.kernel.run.forking`).
    """
    _prctl()


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the process that forked it exits."""
    _prctl()(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def supervise(payload: worker.WorkerPayload, environment: WorkerEnvironment, kernel_pid: int) -> int:
    """Run the workers; return the supervisor's exit code. Runs in the forked child."""
    os.setpgid(0, 0)
    die_with_parent()
    if os.getppid() != kernel_pid:  # the kernel died before the line above
        return 1
    capture_output(payload.writer)
    # When the notebook has not imported torch, importing it here starts
    # OpenBLAS's thread pool (through numpy), so this process may be
    # multi-threaded when `xmp.spawn` forks the workers; OpenBLAS prepares its
    # pool for a fork itself. Python 3.12+'s warning about it says nothing the
    # user can act on.
    warnings.filterwarnings("ignore", message=FORK_WARNING.pattern, category=DeprecationWarning)
    # The workers are forked from a thread of this process's own (`_in_a_fresh_thread`), so in each the main
    # thread's thread-local objects go: among them ipykernel's per-thread zmq sockets, whose ResourceWarning
    # ("Unclosed socket") a notebook with every warning on would see from each worker. They were the kernel's.
    warnings.filterwarnings("ignore", message=r"Unclosed socket <zmq\.", category=ResourceWarning)
    environment.apply()
    if payload.chips is None:  # a TorchTPU run never imports torch_xla
        _note_what_torch_xla_imports(payload.places.exchange_dir)
    report = spawn_workers(payload)
    save_report(report, payload.places.exchange_dir)
    sys.stdout.flush()
    sys.stderr.flush()
    return 0 if report.error is None else 1


def _note_what_torch_xla_imports(exchange_dir: Path) -> None:
    """Import torch_xla here (`spawn_workers` would), and leave the list of modules it brought in for the kernel.

    Most of them are torch's own (its compiler stack); the kernel imports those
    after the run, so the next supervisor imports torch_xla alone
    (`tpu_nb.kernel.run.warm_imports`).
    """
    before = set(sys.modules)
    try:
        import torch_xla.distributed.xla_multiprocessing  # noqa: F401 - the import spawn_workers makes next
    except Exception:  # noqa: BLE001 - spawn_workers makes the same import and reports its failure
        return
    save_imported_modules(sorted(set(sys.modules) - before), exchange_dir)


def spawn_workers(payload: worker.WorkerPayload) -> SupervisorReport:
    """Fork the workers (`xmp.spawn`, or one SPMD worker), wait for them, say how they exited.

    Runs in the supervisor, or in a pod host's `train.py`, which plays its part.
    """
    worker.PAYLOAD = payload
    os.register_at_fork(after_in_child=_become_worker)
    tracker = _ExitTracker()
    error = _in_a_fresh_thread(functools.partial(_fork_and_wait, payload))
    if error is not None:
        return SupervisorReport("".join(traceback.format_exception_only(type(error), error)).strip(), tracker.stop())
    return SupervisorReport(None, tracker.stop())


def _fork_and_wait(payload: worker.WorkerPayload) -> None:
    if payload.chips is not None:
        _run_chip_workers(payload.chips)
    elif payload.mesh is None:
        import torch_xla.distributed.xla_multiprocessing as xmp

        xmp.spawn(worker.run_worker, start_method="fork")
    else:
        _run_spmd_worker()


def _in_a_fresh_thread(forks: Callable[[], None]) -> BaseException | None:
    """Run `forks` (what forks the workers) in a thread of its own and wait; return what it raised.

    The supervisor is a fork of the kernel's main thread, so that thread's
    OpenMP state is the kernel's: once the notebook has run one of torch's
    parallel CPU ops (most ops on more than 32k elements, with two or more
    threads), GNU OpenMP's thread pool belongs to it, and a process forked
    from it has the pool's record without its threads: its first parallel CPU
    op waits for them forever (a layer norm, a dtype conversion, a CPU
    model's forward). A thread started here has no pool, and neither has a
    process forked from it, whose sole thread it is (Python makes that thread
    the child's main thread, signals included); the first parallel op starts
    a new pool. Linux sends a worker's death signal when the thread that
    forked it ends: the thread waits for every worker, except after a rank's
    error, when the others, waiting for it in a collective, end with it.
    """
    raised: list[BaseException] = []

    def run() -> None:
        try:
            forks()
        except BaseException as error:  # noqa: BLE001 - handed to the supervisor's thread, whatever it is
            raised.append(error)

    thread = threading.Thread(target=run, name="tpu_nb-fork-workers")
    thread.start()
    thread.join()
    return raised[0] if raised else None


def _run_spmd_worker() -> None:
    """One forked worker drives every device (SPMD: xmp.spawn and SPMD do not mix)."""
    process = multiprocessing.get_context("fork").Process(target=worker.run_spmd_worker, name="tpu_nb-spmd-worker")
    process.start()
    process.join()
    if process.exitcode != 0:
        raise RuntimeError(f"the SPMD worker ended with exit code {process.exitcode}")


def _run_chip_workers(run: ChipRun) -> None:
    """TorchTPU: fork a process per chip (from this process, which never loaded torch_tpu) and wait for them.

    A rank that ends with an error ends the wait at once: the others would
    wait for it forever in their next collective (the kernel then ends them).
    """
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=worker.run_chip_worker, args=(rank,), name=f"tpu_nb-chip-{rank}") for rank in range(run.chips)]
    for process in processes:
        process.start()
    # Served from here, after the fork (no store thread is copied into a rank), until every rank has ended.
    store = serve_rendezvous(run) if run.chips > 1 else None
    if store is None:
        run.release()  # a world of one meets nobody
    running = {process.sentinel: (rank, process) for rank, process in enumerate(processes)}
    while running:
        for sentinel in multiprocessing.connection.wait(list(running)):
            rank, process = running.pop(sentinel)  # type: ignore[arg-type]  # wait() gives back the sentinels it was given
            process.join()
            if process.exitcode != 0:
                raise RuntimeError(f"rank {rank} (pid {process.pid}) ended with exit code {process.exitcode}")
    del store  # every rank has ended: nobody reads from it any more


def _become_worker() -> None:
    die_with_parent()
    # A worker never handles SIGINT itself: only the kernel decides to stop it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _ExitTracker:
    """Records how each worker process exited (a signal tells an OOM kill apart).

    `xmp.spawn` only says "BrokenProcessPool"; the exit codes live on the
    multiprocessing children it starts. This process is a throwaway fork, so
    wrapping `Process.start` here to keep them touches no one else's state.
    """

    def __init__(self) -> None:
        self._started: list[multiprocessing.process.BaseProcess] = []
        original_start = multiprocessing.process.BaseProcess.start
        started = self._started

        def start(process: multiprocessing.process.BaseProcess) -> None:
            original_start(process)
            started.append(process)

        multiprocessing.process.BaseProcess.start = start  # type: ignore[method-assign,assignment]

    def stop(self) -> dict[int, int]:
        """Worker pid -> exit code, for every worker that has exited."""
        return {process.pid: process.exitcode for process in self._started if process.pid and process.exitcode is not None}
