"""Stack dumps: armed in a process, asked for, faulthandler's text read back, a process that answers, one gone, one that cannot answer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tpu_nb.wire.stacks import stack_dump_path
from tpu_nb.workers.stalls.stack_dumps import ANSWER_SECONDS, armed_processes, armed_target, parse_dump, request_dumps, request_stacks

DUMP = """Thread 0x00007faac916f6c0 (most recent call first):
  File "/tmp/fh.py", line 4 in inner
  File "/usr/lib/python3.11/threading.py", line 982 in run

Current thread 0x00007faac9fbfb80 (most recent call first):
  File "/tmp/fh.py", line 7 in <module>
Thread 0x00000000000000ff [tpu_nb-heartbeat] (most recent call first):
  <no Python frame>
"""


def test_a_dump_is_read_as_threads_with_frames_outermost_first() -> None:
    first, current, named = parse_dump(DUMP)
    assert first.thread == 0x7FAAC916F6C0
    assert [(frame.function, frame.filename, frame.line) for frame in first.frames] == [
        ("run", "/usr/lib/python3.11/threading.py", 982),
        ("inner", "/tmp/fh.py", 4),
    ]
    assert current.thread == 0x7FAAC9FBFB80 and [frame.function for frame in current.frames] == ["<module>"]
    assert named.thread == 0xFF and named.frames == ()
    assert parse_dump("") == () and parse_dump("garbage\n") == ()


ARMED = """
import os, sys, time
from pathlib import Path
from tpu_nb.workers.stalls.stack_dumps import arm_stack_dumps
arm_stack_dumps(Path(sys.argv[1]), os.getpid())
def waiting_here():
    time.sleep(60)
print("ready", flush=True)
waiting_here()
"""


def start_armed(exchange_dir: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-c", ARMED, str(exchange_dir)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def test_processes_answer_each_request_afresh_and_a_gone_or_frozen_one_is_said(tmp_path: Path) -> None:
    answering, frozen, gone = start_armed(tmp_path), start_armed(tmp_path), start_armed(tmp_path)
    gone.kill()
    gone.wait()
    os.kill(frozen.pid, signal.SIGSTOP)  # a stopped process cannot run its signal handler: as if stuck in the OS
    try:
        # Found by their dump files (a pod host's way), the exited one too.
        assert armed_processes(tmp_path) == sorted([answering.pid, frozen.pid, gone.pid])
        for _ in range(2):  # the second answer replaces the first: one thread list, not two
            started = time.monotonic()
            answered, not_frozen, not_there = request_stacks(tmp_path, [answering.pid, frozen.pid, gone.pid])
            assert time.monotonic() - started < ANSWER_SECONDS + 1
            [thread] = answered.threads
            assert answered.problem is None and [frame.function for frame in thread.frames][-2:] == ["<module>", "waiting_here"]
            assert not_frozen.threads == () and "no answer within" in (not_frozen.problem or "")
            assert not_there.problem == "the process has exited"
    finally:
        for process in (answering, frozen):
            process.kill()
            process.wait()


def test_a_pid_that_names_another_process_since_its_worker_exited_gets_no_signal(tmp_path: Path) -> None:
    worker = start_armed(tmp_path)
    armed_then = armed_target(tmp_path, worker.pid)
    worker.kill()
    worker.wait()
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # SIGUSR2 would end it
    try:
        assert armed_then is not None and armed_then.started_at is not None
        # The exited worker's files, as if its pid had gone to the bystander (which started later).
        stack_dump_path(tmp_path, bystander.pid).write_text("")
        stack_dump_path(tmp_path, bystander.pid).with_suffix(".started").write_text(repr(armed_then.started_at - 1))

        assert bystander.pid in armed_processes(tmp_path)
        [dump] = request_dumps(tmp_path, [bystander.pid])

        assert dump.pid == bystander.pid and dump.problem == "the process has exited"
        time.sleep(0.2)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


DUMPING = """
import sys, threading, time
from pathlib import Path
from tpu_nb.workers.stalls.stack_dumps import arm_stack_dumps
arm_stack_dumps(Path(sys.argv[1]), __import__("os").getpid())
arm_stack_dumps(Path(sys.argv[1]), __import__("os").getpid())  # once per process
def waiting_in_a_thread():
    time.sleep(60)
threading.Thread(target=waiting_in_a_thread, daemon=True).start()
print("ready", flush=True)
time.sleep(60)
"""


def test_armed_stack_dumps_write_every_thread_on_the_signal(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, "-c", DUMPING, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        os.kill(process.pid, signal.SIGUSR2)
        dump = stack_dump_path(tmp_path, process.pid)
        deadline = time.monotonic() + 10
        while "in waiting_in_a_thread" not in dump.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        text = dump.read_text()
        assert "in waiting_in_a_thread" in text and "in <module>" in text
        assert process.poll() is None  # the signal did not end it
    finally:
        process.kill()
        process.wait()


def test_a_dump_names_tpu_nbs_own_files_so_that_another_machine_knows_them() -> None:
    from tpu_nb.workers.doctor.places import TPU_NB_DIR, is_tpu_nb
    from tpu_nb.workers.stalls.stack_dumps import portable

    text = f'  File "{TPU_NB_DIR}/workers/cell_api/reporting.py", line 80 in _beat\n  File "In [2]", line 3 in <module>\n'
    [beat, cell] = portable(text).splitlines()
    assert beat == '  File "<tpu_nb>/workers/cell_api/reporting.py", line 80 in _beat' and cell == '  File "In [2]", line 3 in <module>'
    assert is_tpu_nb("<tpu_nb>/workers/cell_api/reporting.py") and not is_tpu_nb("In [2]")
