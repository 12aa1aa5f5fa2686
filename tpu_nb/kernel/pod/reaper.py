"""Ends a pod run whose kernel died: a small process of its own that outlives the kernel and cleans up after it.

A local run dies with its kernel (the workers' parent-death signal), but a
pod run lives on other machines: the hosts' processes, a JobSet holding TPUs.
So each pod run starts a reaper first. It reads a pipe from the kernel until
the kernel says the run ended ("done"), or until the pipe closes without a
word, which happens however the kernel goes (an exit, a restart, SIGKILL):
then it ends the local command's process group, runs the backend's
commands that end the run everywhere, and removes the run's local copy.

It runs in its own session (Jupyter's restart signals the kernel's group,
not it) with only the standard library, from this file.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from tpu_nb.basics.signals import send_group_signal

_END_GRACE = 3.0
_COMMAND_TIMEOUT = 120.0


class Reaper:
    """The kernel's end: tell the reaper which local process group to end, and when the run ended on its own."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process

    @classmethod
    def start(cls, end_commands: Sequence[Sequence[str]], remove: Sequence[str] = ()) -> Reaper:
        """Start the reaper with the commands that end the run everywhere and the local files to remove (before the run starts)."""
        orders = {"end": [list(command) for command in end_commands], "remove": list(remove)}
        process = subprocess.Popen(
            [sys.executable, "-I", __file__, json.dumps(orders)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return cls(process)

    @property
    def pid(self) -> int:
        return self._process.pid

    def watch_group(self, pgid: int) -> None:
        """Also end this local process group (the backend's command) if the kernel dies."""
        self._say(f"group {pgid}")

    def release(self) -> None:
        """The run ended and was cleaned up here: the reaper leaves without doing anything."""
        self._say("done")
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait()

    def _say(self, line: str) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(f"{line}\n".encode())
            self._process.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the reaper is gone (killed by someone): nothing to tell


def main(argv: list[str]) -> int:
    """The reaper's process: wait for the kernel to say "done", or to go."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    orders = json.loads(argv[1])
    groups: list[int] = []
    for line in sys.stdin:
        word, _, rest = line.strip().partition(" ")
        if word == "done":
            return 0
        if word == "group":
            groups.append(int(rest))
    # The pipe closed without "done": the kernel is gone, and its run with nobody to follow it.
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            send_group_signal(group, signum)  # only while a member runs: a group id is reused once its last member is gone
        if signum == signal.SIGTERM and groups:
            time.sleep(_END_GRACE)
    for command in orders["end"]:
        try:
            subprocess.run(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=_COMMAND_TIMEOUT
            )
        except (OSError, subprocess.TimeoutExpired):
            continue  # the next command may still work; nobody is left to tell
    for path in orders["remove"]:
        shutil.rmtree(path, ignore_errors=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
