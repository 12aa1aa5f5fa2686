"""A pod host's part of a run: what the generated `train.py` calls on every host of a TPU slice.

On one machine the kernel forks a supervisor, which forks the workers. On a
pod, every host runs `python train.py` at the same time and this module
plays the kernel's part there: it runs the prepared cells (as the notebook
ran them), forks the workers with the training cell, and sends every event
to stdout as JSON lines (`tpu_nb.wire.host_lines`), which the notebook
reads through gcloud or kubectl. The notebook's requests arrive as files in
the run directory, written on every host: `stop` holding the step to stop
at, and `stacks-request`, on which this host asks its workers for their
stacks and sends them back as `StackAnswer`s. Rank 0 (on host 0) saves the results in `results/`, and copies them
to the run's `gs://` location when it has one.
"""

from __future__ import annotations

import linecache
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from tpu_nb.basics.signals import send_group_signal
from tpu_nb.runtime.system import SystemView, installed_version
from tpu_nb.runtime.versions import release, same_release
from tpu_nb.wire.events import Notice
from tpu_nb.wire.host_lines import HostEnded, LineWriter
from tpu_nb.wire.limits import cap_text
from tpu_nb.wire.results import ResultPlaces, index_file
from tpu_nb.wire.run_directory import (
    MATCHED_PACKAGES,
    RESULTS,
    Cell,
    Manifest,
    forget_group,
    read_stacks_request,
    read_stop,
    upload,
    write_group,
)
from tpu_nb.wire.shared_memory_stop import StopRequest
from tpu_nb.wire.stacks import StackAnswer
from tpu_nb.wire.worker_exceptions import ExceptionReport, load_exceptions
from tpu_nb.workers.cell_output.printed_output import capture_output, flush_output
from tpu_nb.workers.cell_output.tracebacks import format_user_traceback
from tpu_nb.workers.processes.programs import compile_cell
from tpu_nb.workers.processes.supervisor import spawn_workers
from tpu_nb.workers.processes.worker import WorkerPayload
from tpu_nb.workers.stalls.stack_dumps import armed_processes, portable, request_dumps

REQUEST_POLL_SECONDS = 0.25
DUMP_BYTES = 256 * 1024
"""Of one worker process's stack dump, sent to the notebook (faulthandler caps a dump at 100 threads of 100 frames)."""


def run_host(namespace: dict[str, Any], prepared: Sequence[Cell], train: Cell) -> NoReturn:
    """`train.py`'s main: run this host's part and exit with its status."""
    run_dir = Path(namespace["__file__"]).resolve().parent
    leads_group = _lead_process_group(run_dir)
    writer = LineWriter(os.dup(sys.stdout.fileno()), host_index(), on_broken=_end_host if leads_group else None)
    try:
        status = _run_host(run_dir, writer, namespace, prepared, train)
    finally:
        forget_group(run_dir)  # its processes are gone: nothing for the notebook's Kill to end
    sys.exit(status)


def host_index(environ: dict[str, str] | None = None) -> int:
    """This host's number in the slice: what GKE and the TPU VM metadata say (0 on one machine)."""
    environ = dict(os.environ) if environ is None else environ
    for name in ("TPU_WORKER_ID", "CLOUD_TPU_TASK_ID"):
        if environ.get(name, "").isdecimal():
            return int(environ[name])
    if environ.get("PJRT_DEVICE") == "TPU":
        from torch_xla._internal import tpu  # reads the VM's metadata; starts no runtime

        return int(tpu.worker_id())
    return 0


def version_problem(manifest: Manifest, host: int) -> str | None:
    """What differs from the notebook in the packages every host must match, with the fix."""
    here = {name: installed_version(name) for name in MATCHED_PACKAGES}
    wanted = {name: version for name in MATCHED_PACKAGES if (version := manifest.packages.get(name)) is not None}
    differ = [name for name, version in wanted.items() if not same_release(here[name], version)]
    if not differ:
        return None
    found = ", ".join(f"{name} {here[name] or 'not installed'}" for name in differ)
    install = " ".join(f"{name}=={release(wanted[name])}" for name in differ)
    return f"host {host} has {found}, unlike the notebook; install the notebook's versions on every host: pip install {install}"


def _run_host(run_dir: Path, writer: LineWriter, namespace: dict[str, Any], prepared: Sequence[Cell], train: Cell) -> int:
    plan = Manifest.read(run_dir)
    problem = version_problem(plan, writer.host)
    if problem is not None:
        writer.send(HostEnded("refused", problem))
        return 3
    capture_output(writer)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # as on one machine (tpu_nb.kernel.planning.worker_environment)
    stop_request = StopRequest(plan.devices)
    threading.Thread(target=_watch_requests, args=(run_dir, stop_request, writer), name="tpu_nb-requests", daemon=True).start()
    for cell in (*prepared, train):
        linecache.cache[cell.name] = (0, None, cell.lines_as_written(), cell.name)  # tracebacks show the cell's lines
    try:
        for cell in prepared:
            exec(compile("\n" + cell.source, cell.name, "exec"), namespace)
    except Exception as error:  # noqa: BLE001 - the user's error goes to the notebook
        flush_output()
        writer.send(ExceptionReport.of(None, plan.hosts, error, format_user_traceback(error)))
        writer.send(HostEnded("raised"))
        return 1
    program = compile_cell(train.source, train.name, namespace, plan.return_names, first_line=2)
    results = run_dir / RESULTS
    results.mkdir(exist_ok=True)
    report = spawn_workers(
        WorkerPayload(
            program, writer, stop_request, ResultPlaces(results), False, plan.mesh, plan.doctor, plan.compile_cache, watchdog=plan.watchdog
        )
    )
    flush_output()
    raised = load_exceptions(results)
    for rank in sorted(raised):
        writer.send(raised[rank])
    if raised:
        writer.send(HostEnded("raised"))
        return 1
    if report.error is not None:
        writer.send(HostEnded("died", f"{report.error} (worker exit codes: {sorted(report.exit_codes.values())})"))
        return 1
    if plan.run_url is not None and index_file(results, 0).exists():
        destination = f"{plan.run_url.rstrip('/')}/{RESULTS}"
        try:
            upload(results, destination)
        except (ImportError, ValueError, OSError) as error:  # gcsfs missing, no access, a full disk
            writer.send(
                HostEnded(
                    "died",
                    f"trained, but could not save the results to {destination} ({type(error).__name__}: {error}); gs:// needs gcsfs on the hosts",
                )
            )
            return 1
    writer.send(HostEnded("done"))
    return 0


def _lead_process_group(run_dir: Path) -> bool:
    """Lead a process group of this host's processes, so the notebook's Kill ends them all with one signal."""
    try:
        os.setpgid(0, 0)
    except PermissionError:
        pass  # a session leader (ssh started us with exec) leads its group already
    if os.getpgrp() != os.getpid():
        return False
    started = SystemView.current().process_start_ticks(os.getpid())
    if started is not None:  # else no file: what it names could not be told from a later process of that pid
        write_group(run_dir, os.getpid(), started)
    return True


def _end_host() -> None:
    """The notebook stopped following (its gcloud ended with its kernel): end this host's run, every process of it."""
    send_group_signal(os.getpgrp(), signal.SIGTERM)


def _watch_requests(run_dir: Path, stop_request: StopRequest, writer: LineWriter) -> None:
    """The notebook's requests, delivered as files (see `tpu_nb.wire.run_directory`): a graceful stop, and stacks.

    It outlives its own errors (a request file it cannot read, a dump it
    cannot send): each is said once on the dashboard, and stops keep being
    delivered, which is what this thread is for.
    """
    answered = None
    said: set[str] = set()

    def say_once(what: str, error: Exception) -> None:
        text = f"host {host_index()}: {what} failed ({type(error).__name__}: {error}); it goes on watching for the notebook's requests"
        if text not in said:
            said.add(text)
            writer.send(Notice(0, text))

    while True:
        time.sleep(REQUEST_POLL_SECONDS)
        try:
            _take_stop(run_dir, stop_request)
        except Exception as error:  # noqa: BLE001 - any error: this thread must go on delivering stops
            say_once("reading the stop request", error)
        try:
            request = read_stacks_request(run_dir)
            if request is not None and request != answered:
                answered = request
                answer_stacks(run_dir / RESULTS, request, writer)
        except Exception as error:  # noqa: BLE001 - as above
            say_once("answering a stacks request", error)


def _take_stop(run_dir: Path, stop_request: StopRequest) -> None:
    if stop_request.requested:
        return
    reason, step = read_stop(run_dir)
    if reason is not None and step is not None:
        stop_request.request_at(step, reason)
    elif reason is not None:
        stop_request.request(reason)  # no step known: each host stops one past its furthest rank


def answer_stacks(dump_dir: Path, request: int, writer: LineWriter) -> None:
    """Ask this host's worker processes for their stacks and send what each wrote (from this thread: the workers may be stuck)."""
    for dump in request_dumps(dump_dir, armed_processes(dump_dir)):
        writer.send(StackAnswer(request, dump.pid, cap_text(portable(dump.text), DUMP_BYTES), problem=dump.problem))
