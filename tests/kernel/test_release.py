"""%tpu_release: real processes on fake TPU device files ended (or left) for real; a fake /proc for other users and ancestors."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from support.device_holders import FakeTpu, fake_tpu_in
from support.processes import wait_until

from tpu_nb.kernel.release import Ended, Left, Release, describe_release, release_tpu
from tpu_nb.runtime import SystemView
from tpu_nb.runtime.device_holders import tpu_device_holders

BACKGROUND_RUN = "%%tpu_train --background (job)"


@pytest.fixture
def fake_tpu(tmp_path: Path) -> Iterator[FakeTpu]:
    with fake_tpu_in(tmp_path) as tpu:
        yield tpu


def ours(release: Release, tpu: FakeTpu) -> tuple[dict[int, Ended], dict[int, Left]]:
    """What happened to the test's processes (a machine with a real TPU may show others, which `tpu.send` refuses)."""
    ended = {item.holder.pid: item for item in release.ended if item.holder.pid in tpu.pids}
    left = {item.holder.pid: item for item in release.left if item.holder.pid in tpu.pids}
    return ended, left


def test_ends_the_stale_holder_and_leaves_what_this_kernel_started(fake_tpu: FakeTpu) -> None:
    child = fake_tpu.hold_as_child("accel0")
    orphan = fake_tpu.hold_as_orphan("accel1")

    release = release_tpu(fake_tpu.view(), None, grace=5, send=fake_tpu.send)

    ended, left = ours(release, fake_tpu)
    assert list(ended) == [orphan] and ended[orphan].by == "SIGTERM"
    assert not fake_tpu.alive(orphan)
    assert list(left) == [child] and fake_tpu.alive(child)
    assert left[child].reason == "started by this kernel (child of the kernel), not as a tpu_nb run"
    assert left[child].fix == f"end it where you started it, or kill {child}"
    # Only the stale one was signalled: never this process, never its child.
    assert [(pid, signum) for pid, signum in fake_tpu.sent if pid in (orphan, child, os.getpid())] == [(orphan, signal.SIGTERM)]
    text, _ = describe_release(release)
    assert f"pid {orphan} (" in text and "): ended by SIGTERM" in text


def test_one_that_ignores_sigterm_needs_sigkill(fake_tpu: FakeTpu) -> None:
    stuck = fake_tpu.hold_as_orphan("vfio/0", ignore_term=True)

    release = release_tpu(fake_tpu.view(), None, grace=0.5, send=fake_tpu.send)

    ended, _ = ours(release, fake_tpu)
    assert ended[stuck].by == "SIGKILL"
    assert not fake_tpu.alive(stuck)
    assert [signum for pid, signum in fake_tpu.sent if pid == stuck] == [signal.SIGTERM, signal.SIGKILL]
    assert f"pid {stuck} (" in describe_release(release)[0]
    assert "needed SIGKILL (still running after SIGTERM)" in describe_release(release)[0]


def test_a_holder_from_this_kernels_running_run_is_left_to_its_handle(fake_tpu: FakeTpu) -> None:
    worker = fake_tpu.hold_as_child("accel0")

    release = release_tpu(fake_tpu.view(), BACKGROUND_RUN, grace=5, send=fake_tpu.send)

    _, left = ours(release, fake_tpu)
    assert left[worker].reason == f"started by this kernel (child of the kernel), where {BACKGROUND_RUN} is still running"
    assert left[worker].fix == "interrupt the cell running it, or call .stop() or .kill() on a background run's handle"
    assert fake_tpu.alive(worker) and not fake_tpu.sent


def test_a_dry_run_lists_and_signals_nothing(fake_tpu: FakeTpu) -> None:
    orphan = fake_tpu.hold_as_orphan("accel0")

    release = release_tpu(fake_tpu.view(), None, dry_run=True, send=fake_tpu.send)

    assert orphan in [holder.pid for holder in release.would_end]
    assert release.ended == () and not fake_tpu.sent and fake_tpu.alive(orphan)
    text, markup = describe_release(release)
    assert text.startswith("Would end ") and "(dry run: nothing was signalled):" in text
    assert "not from this kernel (stale?)" in text and "<li>pid " in markup


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_process(root: Path, pid: int, parent: int, uid: int, holds: str | None = "/dev/accel0") -> None:
    write(root, f"proc/{pid}/status", f"State:\tS (sleeping)\nPPid:\t{parent}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    write(root, f"proc/{pid}/cmdline", f"python3\0proc{pid}.py\0")
    if holds is not None:
        (root / f"proc/{pid}/fd").mkdir(parents=True)
        os.symlink(holds, root / f"proc/{pid}/fd/3")


class FakeSignals:
    """Signals to fake processes: recorded, and a SIGTERM "ends" the process by removing its /proc status."""

    def __init__(self, proc: Path) -> None:
        self.proc = proc
        self.sent: list[tuple[int, int]] = []

    def __call__(self, pid: int, signum: int) -> None:
        self.sent.append((pid, signum))
        if pid == 66:
            raise PermissionError(1, "Operation not permitted")
        (self.proc / str(pid) / "status").unlink()


@pytest.fixture
def machine(tmp_path: Path) -> SystemView:
    """A fake /proc with the kernel (100, uid 1000) under its server (50); all hold the TPU."""
    fake_process(tmp_path, 1, 0, 0, holds=None)
    fake_process(tmp_path, 50, 1, 1000)  # the kernel's server
    fake_process(tmp_path, 100, 50, 1000)  # the kernel itself
    fake_process(tmp_path, 200, 1, 1000)  # stale: a dead kernel's worker
    fake_process(tmp_path, 300, 1, 54321)  # another user's
    fake_process(tmp_path, 66, 1, 1000)  # ours by uid, but the system refuses (e.g. a setuid program)
    (tmp_path / "proc/400/fd").mkdir(parents=True)  # exited while we looked: only its descriptors were read
    os.symlink("/dev/accel0", tmp_path / "proc/400/fd/3")
    return SystemView(environ={}, dev_root=tmp_path / "dev", proc_root=tmp_path / "proc", modules={}, own_pid=100, own_uid=1000)


def test_never_the_kernel_what_it_runs_under_or_another_users(machine: SystemView, tmp_path: Path) -> None:
    send = FakeSignals(tmp_path / "proc")

    release = release_tpu(machine, None, grace=1, send=send)

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
    assert "  pid 300 (python3 proc300.py): it belongs to uid 54321, not to you. Fix: sudo kill 300" in text
    assert markup.startswith('<div class="tpu-nb-release">') and "<strong>Ended 1 process holding the TPU:</strong>" in markup


def test_a_process_gone_before_its_signal_ended_by_itself(machine: SystemView, tmp_path: Path) -> None:
    send = FakeSignals(tmp_path / "proc")
    write(tmp_path, "proc/200/status", "State:\tZ (zombie)\nPPid:\t1\nUid:\t1000\n")  # it exited after being listed

    release = release_tpu(machine, None, send=send)

    assert (200, None) in [(ended.holder.pid, ended.by) for ended in release.ended]
    assert 200 not in [pid for pid, _ in send.sent]


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
