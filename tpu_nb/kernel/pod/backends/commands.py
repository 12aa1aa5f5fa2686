"""Running gcloud and kubectl from the kernel: never interactive, never left running.

Every command gets no stdin (a prompt for a password or a key passphrase
fails at once instead of hanging the notebook) and a timeout; a long-lived
one (the hosts' output) leads its own session, so ending it ends everything
it started.
"""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
from collections.abc import Sequence

from tpu_nb.basics.signals import send_group_signal
from tpu_nb.wire.limits import cap_text

COMMAND_TIMEOUT = 120.0  # seconds: an ssh to every host of a slice, a kubectl call
END_GRACE = 3.0  # seconds between SIGTERM and SIGKILL


class CommandFailed(Exception):
    """A command exited with an error; the message has the command and what it said."""

    def __init__(self, argv: Sequence[str], code: int | None, output: str) -> None:
        said = cap_text("\n".join(output.strip().splitlines()[-12:]), 4000)
        how = "timed out" if code is None else f"exited with code {code}"
        super().__init__(f"`{shlex.join(argv)}` {how}" + (f":\n{said}" if said else ""))
        self.output = output


def installed(tool: str) -> bool:
    return shutil.which(tool) is not None


def run(argv: Sequence[str], timeout: float = COMMAND_TIMEOUT) -> str:
    """Run to the end; its stdout, or `CommandFailed` with its stderr."""
    try:
        done = subprocess.run(
            list(argv), stdin=subprocess.DEVNULL, capture_output=True, encoding="utf-8", errors="replace", timeout=timeout
        )
    except subprocess.TimeoutExpired as error:
        raise CommandFailed(argv, None, _text(error.stderr)) from None
    if done.returncode != 0:
        raise CommandFailed(argv, done.returncode, done.stderr or done.stdout)
    return done.stdout


def run_despite_interrupts(argv: Sequence[str], timeout: float = COMMAND_TIMEOUT) -> str:
    """`run`, to its end even if the user interrupts meanwhile: for what must not stay half done (deleting cluster objects).

    An interrupt kills the command (subprocess does), so it starts again: such commands do nothing twice.
    """
    while True:
        try:
            return run(argv, timeout)
        except KeyboardInterrupt:
            continue


def start(argv: Sequence[str]) -> subprocess.Popen[bytes]:
    """Start a long-lived command whose stdout and stderr the caller reads (as bytes: hosts print anything)."""
    return subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def end(process: subprocess.Popen[bytes]) -> None:
    """End a started command and everything it started (its session's process group)."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        send_group_signal(process.pid, signum)
        try:
            process.wait(END_GRACE)
            return
        except subprocess.TimeoutExpired:
            continue


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""
