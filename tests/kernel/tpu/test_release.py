"""%tpu_release: real processes on fake TPU device files ended (or left) for real; a fake /proc for other users and ancestors."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from support.device_holders import FakeTpu, fake_tpu_in
from support.processes import wait_until

from tpu_nb.basics.signals import Delivery, Target
from tpu_nb.kernel.tpu.release import Ended, Left, Release, describe_release, release_tpu
from tpu_nb.runtime import SystemView
from tpu_nb.runtime.device_holders import tpu_device_holders

BACKGROUND_RUN = "%%tpu_train --background (job)"


@pytest.fixture
def fake_tpu(tmp_path: Path) -> Iterator[FakeTpu]:
    with fake_tpu_in(tmp_path) as tpu:
        yield tpu


def ours(release: Release, tpu: FakeTpu) -> tuple[dict[int, Ended], dict[int, Left]]:
    """What happened to the test's processes (a machine with a real TPU may show others, which `tpu.signal_with` refuses)."""
    ended = {item.holder.pid: item for item in release.ended if item.holder.pid in tpu.pids}
    left = {item.holder.pid: item for item in release.left if item.holder.pid in tpu.pids}
    return ended, left


def test_ends_the_stale_holder_and_leaves_what_this_kernel_started(fake_tpu: FakeTpu) -> None:
    child = fake_tpu.hold_as_child("accel0")
    orphan = fake_tpu.hold_as_orphan("accel1")

    release = release_tpu(fake_tpu.view(), None, grace=5, signal_with=fake_tpu.signal_with)

    ended, left = ours(release, fake_tpu)
    assert list(ended) == [orphan] and ended[orphan].by == "SIGTERM"
    assert not fake_tpu.alive(orphan)
    assert list(left) == [child] and fake_tpu.alive(child)
    assert left[child].reason == "started by this kernel (child of the kernel), not as a tpu_nb run"
    assert left[child].fix == f"end it where you started it, or %tpu_release {child}"
    # Only the stale one was signalled: never this process, never its child.
    assert [(pid, signum) for pid, signum in fake_tpu.sent if pid in (orphan, child, os.getpid())] == [(orphan, signal.SIGTERM)]
    text, _ = describe_release(release)
    assert f"pid {orphan} (" in text and "): ended by SIGTERM" in text


def test_an_orphan_a_notebook_kernel_started_is_ended_and_one_a_shell_left_is_listed_for_the_user_to_name(fake_tpu: FakeTpu) -> None:
    # Both lost their session's leader. One is a dead kernel's worker; the other a `nohup python train.py &` started over
    # SSH before logging out: nothing shows it is a notebook's, and it may be training on purpose.
    from_kernel = fake_tpu.hold_as_orphan("accel0")
    from_shell = fake_tpu.hold_as_orphan("accel1", from_kernel=False)

    release = release_tpu(fake_tpu.view(), None, grace=5, signal_with=fake_tpu.signal_with)

    ended, left = ours(release, fake_tpu)
    assert list(ended) == [from_kernel] and not fake_tpu.alive(from_kernel)
    assert list(left) == [from_shell] and fake_tpu.alive(from_shell)
    assert [pid for pid, _ in fake_tpu.sent if pid == from_shell] == []  # never signalled
    assert left[from_shell].reason.startswith("live: orphaned: the shell or program it was started from (session ")
    assert left[from_shell].reason.endswith(
        "has exited, and nothing shows a notebook kernel started it (a job left running on purpose, such as `nohup python "
        "train.py &` over SSH?)"
    )
    assert left[from_shell].fix == f"%tpu_release {from_shell} ends it (%tpu_release --all: every live holder)"
    text, _ = describe_release(release)
    assert f"pid {from_shell} (" in text and f"Fix: %tpu_release {from_shell} ends it" in text
    named = release_tpu(fake_tpu.view(), None, named=(from_shell,), grace=5, signal_with=fake_tpu.signal_with)
    assert from_shell in ours(named, fake_tpu)[0] and not fake_tpu.alive(from_shell)  # named: ended


def test_one_that_ignores_sigterm_needs_sigkill(fake_tpu: FakeTpu) -> None:
    stuck = fake_tpu.hold_as_orphan("vfio/0", ignore_term=True)

    release = release_tpu(fake_tpu.view(), None, grace=0.5, signal_with=fake_tpu.signal_with)

    ended, _ = ours(release, fake_tpu)
    assert ended[stuck].by == "SIGKILL"
    assert not fake_tpu.alive(stuck)
    assert [signum for pid, signum in fake_tpu.sent if pid == stuck] == [signal.SIGTERM, signal.SIGKILL]
    assert f"pid {stuck} (" in describe_release(release)[0]
    assert "needed SIGKILL (still running after SIGTERM)" in describe_release(release)[0]


def test_a_holder_from_this_kernels_running_run_is_left_to_its_handle(fake_tpu: FakeTpu) -> None:
    worker = fake_tpu.hold_as_child("accel0")

    release = release_tpu(fake_tpu.view(), BACKGROUND_RUN, grace=5, signal_with=fake_tpu.signal_with)

    _, left = ours(release, fake_tpu)
    assert left[worker].reason == f"started by this kernel (child of the kernel), where {BACKGROUND_RUN} is still running"
    assert left[worker].fix == "interrupt the cell running it, or call .stop() or .kill() on a background run's handle"
    assert fake_tpu.alive(worker) and not fake_tpu.sent


def test_a_dry_run_lists_and_signals_nothing(fake_tpu: FakeTpu) -> None:
    orphan = fake_tpu.hold_as_orphan("accel0")

    release = release_tpu(fake_tpu.view(), None, dry_run=True, signal_with=fake_tpu.signal_with)

    assert orphan in [holder.pid for holder in release.would_end]
    assert release.ended == () and not fake_tpu.sent and fake_tpu.alive(orphan)
    text, markup = describe_release(release)
    assert text.startswith("Would end ") and "(dry run: nothing was signalled):" in text
    assert "stale: the notebook kernel it was started from (session " in text and "<li>pid " in markup


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_process(root: Path, pid: int, parent: int, uid: int, holds: str | None = "/dev/accel0", session: int = 50) -> None:
    """A process in a fake /proc (in session 50, the kernel's server's, unless told), started 60 s after boot, from a notebook
    kernel (its environment has jupyter_client's JPY_PARENT_PID)."""
    write(root, f"proc/{pid}/status", f"State:\tS (sleeping)\nPPid:\t{parent}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    write(root, f"proc/{pid}/environ", "JPY_PARENT_PID=50\0")
    ticks = os.sysconf("SC_CLK_TCK")
    write(root, f"proc/{pid}/stat", f"{pid} (python3) S {parent} {pid} {session} " + "0 " * 15 + f"{60 * ticks} 0 0\n")
    write(root, f"proc/{pid}/cmdline", f"python3\0proc{pid}.py\0")
    if holds is not None:
        (root / f"proc/{pid}/fd").mkdir(parents=True)
        os.symlink(holds, root / f"proc/{pid}/fd/3")


class FakeSignals:
    """Signals to fake processes, through send_signal's checks: recorded, and a SIGTERM "ends" the process by removing its /proc status."""

    def __init__(self, proc: Path, reused: Collection[int] = (), exited: Collection[int] = ()) -> None:
        self.proc = proc
        self.reused = reused
        """Pids that exit and go to a newer process right before their signal."""
        self.exited = exited
        """Pids that exit right before their signal and stay zombies (which hold no files)."""
        self.sent: list[tuple[int, int]] = []

    def __call__(self, target: Target, signum: int, *, still_target: Callable[[], bool], system: SystemView) -> Delivery:
        if target.pid in self.reused:
            ticks = os.sysconf("SC_CLK_TCK")
            write(
                self.proc.parent,
                f"proc/{target.pid}/stat",
                f"{target.pid} (python3) S 1 {target.pid} 150 " + "0 " * 15 + f"{90 * ticks} 0 0\n",
            )
        if target.pid in self.exited and (self.proc / f"{target.pid}/fd/3").is_symlink():
            write(self.proc.parent, f"proc/{target.pid}/status", "State:\tZ (zombie)\nPPid:\t1\nUid:\t1000\n")
            (self.proc / f"{target.pid}/fd/3").unlink()
        if system.process_started_at(target.pid) != target.started_at:
            return Delivery.GONE
        if not still_target():
            return Delivery.NOT_A_TARGET
        self.sent.append((target.pid, signum))
        if target.pid == 66:
            return Delivery.REFUSED
        (self.proc / str(target.pid) / "status").unlink()
        (self.proc / str(target.pid) / "stat").unlink()
        return Delivery.SENT


@pytest.fixture
def machine(tmp_path: Path) -> SystemView:
    """A fake /proc with the kernel (100, uid 1000, its own session) under its server (50); all hold the TPU."""
    write(tmp_path, "proc/stat", "cpu  1 2 3\nbtime 1764600000\n")
    fake_process(tmp_path, 1, 0, 0, holds=None, session=1)
    fake_process(tmp_path, 50, 1, 1000)  # the kernel's server
    fake_process(tmp_path, 100, 50, 1000, session=100)  # the kernel itself
    fake_process(tmp_path, 200, 1, 1000, session=150)  # stale: a dead kernel's worker (no session 150 any more)
    fake_process(tmp_path, 300, 1, 54321)  # another user's
    fake_process(tmp_path, 66, 1, 1000, session=150)  # stale, ours by uid, but the system refuses (e.g. a setuid program)
    (tmp_path / "proc/400/fd").mkdir(parents=True)  # exited while we looked: only its descriptors were read
    os.symlink("/dev/accel0", tmp_path / "proc/400/fd/3")
    return SystemView(environ={}, dev_root=tmp_path / "dev", proc_root=tmp_path / "proc", modules={}, own_pid=100, own_uid=1000)


def test_never_the_kernel_what_it_runs_under_or_another_users(machine: SystemView, tmp_path: Path) -> None:
    send = FakeSignals(tmp_path / "proc")

    release = release_tpu(machine, None, grace=1, cpu_window=0, signal_with=send)

    assert send.sent == [(66, signal.SIGTERM), (200, signal.SIGTERM)]
    assert [(ended.holder.pid, ended.by) for ended in release.ended] == [(200, "SIGTERM")]
    left = {item.holder.pid: item for item in release.left}
    assert set(left) == {50, 66, 300, 400}
    assert left[50].reason == "this kernel runs under it, so ending it would end the kernel"
    assert left[50].fix == "restart the runtime"
    assert left[300].reason == "it belongs to uid 54321, not to you"
    assert left[300].fix == "sudo kill 300 (or ask uid 54321 to end it), or restart the runtime"
    assert left[66].reason == "the system did not allow signalling it (SIGTERM: permission denied)"
    assert left[66].fix == "sudo kill 66"
    assert left[400].reason == "its owner could not be read (it may just have exited)"
    text, markup = describe_release(release)
    assert text.splitlines()[:2] == ["Ended 1 process holding the TPU:", "  pid 200 (python3 proc200.py): ended by SIGTERM"]
    assert "Left 4 processes holding the TPU:" in text
    assert "  pid 300 (python3 proc300.py), parent 1, running " in text  # not stale: its parent, age and CPU use
    assert ": it belongs to uid 54321, not to you. Fix: sudo kill 300" in text
    assert markup.startswith('<div class="tpu-nb-release">') and "<strong>Ended 1 process holding the TPU:</strong>" in markup


def test_a_process_gone_before_its_signal_ended_by_itself(machine: SystemView, tmp_path: Path) -> None:
    send = FakeSignals(tmp_path / "proc", exited={200})

    release = release_tpu(machine, None, cpu_window=0, signal_with=send)

    assert (200, None) in [(ended.holder.pid, ended.by) for ended in release.ended]
    assert 200 not in [pid for pid, _ in send.sent]


def test_a_pid_reused_between_listing_and_signalling_gets_no_signal(machine: SystemView, tmp_path: Path) -> None:
    send = FakeSignals(tmp_path / "proc", reused={200})

    release = release_tpu(machine, None, grace=1, cpu_window=0, signal_with=send)

    assert 200 not in [pid for pid, _ in send.sent]
    assert (200, None) in [(ended.holder.pid, ended.by) for ended in release.ended]  # the holder listed is gone


class SigtermIgnored(FakeSignals):
    """SIGTERM reaches every process and ends none; SIGKILL goes through FakeSignals (66 refuses it, `exited` go first)."""

    def __call__(self, target: Target, signum: int, *, still_target: Callable[[], bool], system: SystemView) -> Delivery:
        if signum == signal.SIGTERM:
            self.sent.append((target.pid, signum))
            return Delivery.SENT
        return super().__call__(target, signum, still_target=still_target, system=system)


def test_sigkill_refused_or_too_late_is_told_as_sigterm_s_is(machine: SystemView, tmp_path: Path) -> None:
    send = SigtermIgnored(tmp_path / "proc", exited={200})

    release = release_tpu(machine, None, grace=0.1, cpu_window=0, signal_with=send)

    assert send.sent == [(66, signal.SIGTERM), (200, signal.SIGTERM), (66, signal.SIGKILL)]
    assert [(ended.holder.pid, ended.by) for ended in release.ended] == [(200, "SIGTERM")]  # it went before its SIGKILL
    refused = {item.holder.pid: item for item in release.left}[66]
    assert (refused.reason, refused.fix) == ("the system did not allow signalling it (SIGKILL: permission denied)", "sudo kill 66")


def test_nothing_to_release(tmp_path: Path) -> None:
    release = release_tpu(SystemView(environ={}, dev_root=tmp_path, proc_root=tmp_path, modules={}), None)

    assert release == Release((), ())
    assert describe_release(release) == (
        "Nothing to release: no other process holds the TPU's device files.",
        "<p>Nothing to release: no other process holds the TPU&#x27;s device files.</p>",
    )


def run_line(ip: InteractiveShell, line: str) -> tuple[str, str]:
    with capture_output() as captured:
        ip.run_line_magic("tpu_release", line)
    (output,) = captured.outputs
    return output.data["text/plain"], output.data["text/html"]


def test_the_magic_in_a_shell(ip: InteractiveShell, fake_tpu: FakeTpu, monkeypatch: pytest.MonkeyPatch) -> None:
    child = fake_tpu.hold_as_child("accel0")
    orphan = fake_tpu.hold_as_orphan("vfio/0")
    view = fake_tpu.view()
    if {holder.pid for holder in tpu_device_holders(view)} != {child, orphan}:
        pytest.skip("this machine's real TPU has holders, which the magic would end")
    monkeypatch.setattr(SystemView, "current", classmethod(lambda cls: view))

    text, markup = run_line(ip, "--dry-run")
    assert text.startswith("Would end 1 process holding the TPU") and f"pid {orphan} (" in text
    assert f"pid {child} (" in text and "started by this kernel (child of the kernel), not as a tpu_nb run" in text
    assert fake_tpu.alive(orphan)

    text, markup = run_line(ip, "--grace 5")
    assert f"pid {orphan} (" in text and "): ended by SIGTERM" in text
    assert f"Left 1 process holding the TPU:\n  pid {child} (" in text
    assert "<strong>Ended 1 process holding the TPU:</strong>" in markup
    assert not fake_tpu.alive(orphan) and fake_tpu.alive(child)

    os.kill(child, signal.SIGKILL)
    assert wait_until(lambda: not fake_tpu.alive(child), timeout=10)
    assert run_line(ip, "")[0] == "Nothing to release: no other process holds the TPU's device files."


@pytest.mark.parametrize("line", ["--grace -1", "--grace nan"])
def test_a_bad_grace_is_a_usage_error(ip: InteractiveShell, line: str) -> None:
    with pytest.raises(UsageError, match="give the seconds to wait after SIGTERM, 0 or more"):
        ip.run_line_magic("tpu_release", line)


def test_help_says_what_it_never_ends(ip: InteractiveShell) -> None:
    doc = ip.find_line_magic("tpu_release").__doc__

    assert "--dry-run" in doc and "--grace SECONDS" in doc
    assert "never another user's" in doc and "SIGTERM, then SIGKILL" in doc


def test_a_live_holder_is_listed_with_what_it_is_and_ended_only_when_named(fake_tpu: FakeTpu) -> None:
    detached = fake_tpu.hold_detached("accel0")  # `!nohup python train.py &` from this notebook: adopted by init, still running
    leader = fake_tpu.hold_in_own_session("accel1")  # another kernel's, another terminal's

    release = release_tpu(fake_tpu.view(), None, grace=5, cpu_window=0.2, signal_with=fake_tpu.signal_with)

    _, left = ours(release, fake_tpu)
    assert set(left) == {detached, leader} and fake_tpu.alive(detached) and fake_tpu.alive(leader) and not fake_tpu.sent
    # Under a session whose leader is outside the container (CI's, `docker exec`'s: 0 here), "from this notebook" cannot be told.
    from_here = (
        "started from this notebook" if os.getsid(0) else "started outside this container's view (its session's leader is not visible here)"
    )
    assert left[detached].reason == f"live: {from_here}"
    assert left[leader].reason == "live: a process of its own session"
    assert left[detached].fix == f"%tpu_release {detached} ends it (%tpu_release --all: every live holder)"
    assert left[detached].cpu_share is not None and 0 <= left[detached].cpu_share < 0.5  # it sleeps
    text, _ = describe_release(release)
    assert f"pid {detached} (" in text and ", parent " in text and ", running " in text
    assert f"% of a CPU in the last 1s: live: {from_here}. Fix: %tpu_release" in text

    release = release_tpu(fake_tpu.view(), None, named=(detached, 999_999_999), grace=5, cpu_window=0, signal_with=fake_tpu.signal_with)

    ended, left = ours(release, fake_tpu)
    assert list(ended) == [detached] and not fake_tpu.alive(detached)
    assert list(left) == [leader] and fake_tpu.alive(leader)
    assert release.not_holding == (999_999_999,)
    assert "Not holding the TPU (nothing to end): pid 999999999" in describe_release(release)[0]

    release = release_tpu(fake_tpu.view(), None, everything=True, grace=5, cpu_window=0, signal_with=fake_tpu.signal_with)

    ended, _ = ours(release, fake_tpu)
    assert list(ended) == [leader] and not fake_tpu.alive(leader)
