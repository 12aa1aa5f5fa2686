"""Signals through pidfds: only to the process chosen (same pid, same start time), and only while it is still a target."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from tpu_nb.basics.signals import Delivery, Target, send_group_signal, send_signal
from tpu_nb.runtime import SystemView


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait(timeout=30)


@pytest.fixture(params=["pidfd", "kill"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways: through a pidfd, and where there is none (os.pidfd_open missing) through os.kill after the same checks."""
    if request.param == "kill":
        monkeypatch.delattr(os, "pidfd_open")
    return str(request.param)


def test_the_process_chosen_gets_the_signal(sleeper: subprocess.Popen[bytes], way: str) -> None:
    target = Target.seen(sleeper.pid)

    assert send_signal(target, signal.SIGTERM) is Delivery.SENT
    assert sleeper.wait(timeout=30) == -signal.SIGTERM


def test_a_pid_that_now_names_a_newer_process_gets_nothing(sleeper: subprocess.Popen[bytes], way: str) -> None:
    chosen = Target.seen(sleeper.pid)
    assert chosen.started_at is not None
    # The process chosen exited and the pid went to this one: same number, later start.
    reused = Target(sleeper.pid, chosen.started_at - 5)

    assert send_signal(reused, signal.SIGTERM) is Delivery.GONE
    assert sleeper.poll() is None


def test_a_process_no_longer_a_target_gets_nothing(sleeper: subprocess.Popen[bytes], way: str) -> None:
    asked = []

    delivery = send_signal(Target.seen(sleeper.pid), signal.SIGTERM, still_target=lambda: asked.append(True) or False)

    assert delivery is Delivery.NOT_A_TARGET and asked == [True]
    assert sleeper.poll() is None


def test_an_exited_process_is_gone(way: str) -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    target = Target.seen(process.pid)
    process.wait(timeout=30)  # reaped: the pid names nothing now (or, rarely, a newer process)

    assert send_signal(target, signal.SIGTERM) is Delivery.GONE


def as_nobody(send: Callable[[], Delivery]) -> str:
    """The name of what `send()` delivers when asked from a process of an unprivileged user (as root, a forked child drops to
    nobody first)."""
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # the child: only os calls, then _exit
        try:
            if os.geteuid() == 0:
                os.setuid(65534)
            os.write(writer, send().name.encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as answer:
        said = answer.read()
    os.waitpid(child, 0)
    return said


def test_another_users_process_is_refused(way: str) -> None:
    assert as_nobody(lambda: send_signal(Target.seen(1), 0)) == "REFUSED"  # init's process


def test_a_group_gets_the_signal_while_a_member_runs_and_another_users_group_refuses() -> None:
    leader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert as_nobody(lambda: send_group_signal(leader.pid, 0)) == "REFUSED"
        assert send_group_signal(leader.pid, signal.SIGTERM) is Delivery.SENT
        assert leader.wait(timeout=30) == -signal.SIGTERM
    finally:
        leader.kill()
        leader.wait(timeout=30)

    assert send_group_signal(leader.pid, signal.SIGTERM) is Delivery.GONE  # reaped: no member left


def test_a_process_whose_start_cannot_be_read_gets_nothing(sleeper: subprocess.Popen[bytes]) -> None:
    blind = SystemView(proc_root=SystemView.current().proc_root / "no-such-directory")

    assert send_signal(Target(sleeper.pid, None), signal.SIGTERM, system=blind) is Delivery.GONE
    assert sleeper.poll() is None
