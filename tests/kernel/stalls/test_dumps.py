"""Asking processes for their stacks: faulthandler's text read back, a process that answers, one gone, one that cannot answer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tpu_nb.kernel.stalls.dumps import ANSWER_SECONDS, parse_dump, request_stacks

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
from tpu_nb.workers.watchdog import arm_stack_dumps
arm_stack_dumps(Path(sys.argv[1]), os.getpid())
def waiting_here():
    time.sleep(60)
print("ready", flush=True)
waiting_here()
"""


def start_armed(run_dir: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-c", ARMED, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def test_processes_answer_each_request_afresh_and_a_gone_or_frozen_one_is_said(tmp_path: Path) -> None:
    answering, frozen = start_armed(tmp_path), start_armed(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    os.kill(frozen.pid, signal.SIGSTOP)  # a stopped process cannot run its signal handler: as if stuck in the OS
    try:
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
