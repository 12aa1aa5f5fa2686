"""Real processes holding fake TPU device files, for the tests of who holds the TPU and of `%tpu_release`.

The device files are plain files under a temporary `dev` directory; a
SystemView with that `dev_root` and the real /proc names them "/dev/...",
so the processes count as TPU holders. Every process started here is
killed when the test ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpu_nb.basics.signals import Delivery, Target, send_signal
from tpu_nb.runtime import SystemView

KERNEL_MARK = "JPY_PARENT_PID"
"""What jupyter_client puts in every kernel's environment (its launcher, on POSIX), so in everything a cell starts."""

# Opens the device file, optionally ignores SIGTERM (a stuck worker), says so, and waits.
_HOLD = """
import signal, sys, time
device = open(sys.argv[1])
if sys.argv[2] == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("holding", flush=True)
time.sleep(120)
"""

# Plays a kernel that dies: leads a new session, starts the holder in it and
# exits at once. The holder is then nobody's child here (init, or a subreaper
# above us, adopts it) and its session's leader is gone: a dead kernel's worker.
_ORPHAN = """
import os, subprocess, sys
os.setsid()
holder = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]])
print(holder.pid, flush=True)
"""

# Starts the holder and exits at once, in this process's session: a `nohup ... &` from a cell, adopted by init.
_DETACHED = """
import subprocess, sys
holder = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]])
print(holder.pid, flush=True)
"""

# Leads a session of its own and holds the device while it lives: another kernel's, another terminal's process.
_SESSION_LEADER = """
import subprocess, sys
holder = subprocess.Popen([sys.executable, "-c", sys.argv[1], *sys.argv[2:]], start_new_session=True)
print(holder.pid, flush=True)
"""


@dataclass
class FakeTpu:
    """A fake /dev with TPU device files, and the processes a test started to hold them."""

    dev: Path
    pids: list[int] = field(default_factory=list)
    sent: list[tuple[int, int]] = field(default_factory=list)
    """Every signal `signal_with` was asked to send, as (pid, signal)."""
    _children: list[subprocess.Popen[str]] = field(default_factory=list)

    def view(self) -> SystemView:
        """This machine (the real /proc), with the fake /dev and this test process as the kernel."""
        return SystemView(environ={}, dev_root=self.dev, modules={})

    def hold_as_child(self, device: str, *, ignore_term: bool = False) -> int:
        """A child of this process (one of "this kernel's" processes) holding `device` ("accel0", "vfio/0")."""
        child = subprocess.Popen(
            [sys.executable, "-c", _HOLD, str(self.dev / device), "ignore-term" if ignore_term else "-"], stdout=subprocess.PIPE, text=True
        )
        self._children.append(child)
        self.pids.append(child.pid)
        assert child.stdout is not None and child.stdout.readline() == "holding\n"
        return child.pid

    def hold_as_orphan(self, device: str, *, ignore_term: bool = False, from_kernel: bool = True) -> int:
        """A process whose session's leader is gone holding `device`: left behind by a notebook kernel that died (stale),
        or, not `from_kernel`, by a shell that exited (`nohup python train.py &` over SSH, then logging out: live).

        A kernel's children carry JPY_PARENT_PID, which jupyter_client gives every kernel it starts; a shell's do not.
        """
        environment = {name: value for name, value in os.environ.items() if name != KERNEL_MARK}
        if from_kernel:
            environment[KERNEL_MARK] = str(os.getpid())  # the notebook server's pid, in a real kernel's environment
        return self._hold_through(_ORPHAN, device, ignore_term, environment)

    def hold_detached(self, device: str) -> int:
        """A process started from "this notebook" (this process's session) and adopted by init, holding `device`: live."""
        return self._hold_through(_DETACHED, device, False)

    def hold_in_own_session(self, device: str) -> int:
        """A process leading a session of its own (as another kernel does) holding `device`: live."""
        return self._hold_through(_SESSION_LEADER, device, False)

    def _hold_through(self, starter_code: str, device: str, ignore_term: bool, environment: dict[str, str] | None = None) -> int:
        """The holder that `starter_code` starts (it prints the holder's pid, then exits): nobody's child here."""
        starter = subprocess.Popen(
            [sys.executable, "-c", starter_code, _HOLD, str(self.dev / device), "ignore-term" if ignore_term else "-"],
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
        )
        assert starter.stdout is not None
        lines = [starter.stdout.readline(), starter.stdout.readline()]  # the holder's pid and "holding", in either order
        starter.wait(timeout=30)
        starter.stdout.close()
        (pid,) = [int(line) for line in lines if line.strip().isdigit()]
        assert "holding\n" in lines
        self.pids.append(pid)
        return pid

    def signal_with(self, target: Target, signum: int, **checks: Any) -> Delivery:
        """Signal a process this test started, through `send_signal`; refuse any other (a real TPU holder on the test machine)."""
        self.sent.append((target.pid, signum))
        if target.pid not in self.pids:
            return Delivery.REFUSED
        return send_signal(target, signum, **checks)

    def alive(self, pid: int) -> bool:
        """Whether `pid` runs (a zombie, killed but not yet reaped, does not)."""
        status = self.view().process_status(pid)
        return status is not None and status.state not in ("Z", "X")

    def kill_all(self) -> None:
        for pid in self.pids:
            if str(self.dev) not in " ".join(self.view().command_line(pid)):
                continue  # exited, and the pid may be another process's now
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for child in self._children:
            child.wait(timeout=30)
            assert child.stdout is not None
            child.stdout.close()


@contextmanager
def fake_tpu_in(tmp_path: Path) -> Iterator[FakeTpu]:
    """Fake /dev/accel0, /dev/accel1, /dev/vfio/0 and /dev/vfio/vfio; the processes started through it are killed on leaving."""
    dev = tmp_path / "dev"
    for name in ("accel0", "accel1", "vfio/0", "vfio/vfio"):
        (dev / name).parent.mkdir(parents=True, exist_ok=True)
        (dev / name).touch()
    tpu = FakeTpu(dev)
    try:
        yield tpu
    finally:
        tpu.kill_all()
