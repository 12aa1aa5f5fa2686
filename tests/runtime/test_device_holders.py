"""Who holds the TPU: real processes on fake device files, and fake /proc trees for what a test cannot start."""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.device_holders import FakeTpu, fake_tpu_in

from tpu_nb.runtime import SystemView
from tpu_nb.runtime.device_holders import COMMAND_WIDTH, Origin, describe_age, is_tpu_device, tpu_device_holders


@pytest.fixture
def fake_tpu(tmp_path: Path) -> Iterator[FakeTpu]:
    with fake_tpu_in(tmp_path) as tpu:
        yield tpu


def test_a_child_of_the_kernel_and_an_orphan_are_told_apart(fake_tpu: FakeTpu) -> None:
    child = fake_tpu.hold_as_child("accel0")
    orphan = fake_tpu.hold_as_orphan("vfio/0")

    holders = {holder.pid: holder for holder in tpu_device_holders(fake_tpu.view())}

    assert {child, orphan} <= set(holders)
    mine, left = holders[child], holders[orphan]
    assert mine.paths == ("/dev/accel0",)
    assert left.paths == ("/dev/vfio/0",)
    for holder in (mine, left):
        program = Path(sys.executable).name
        assert holder.command.startswith(f"{program} -c ")  # the program by name, not its whole path
        assert len(holder.command) <= COMMAND_WIDTH
        assert holder.age is not None and 0 < holder.age < 120
        assert holder.uid == os.getuid()
        assert holder.owner == pwd.getpwuid(os.getuid()).pw_name
    assert (mine.origin, mine.child_of_kernel, mine.parent) == (Origin.THIS_KERNEL, True, os.getpid())
    assert mine.origin_text == "started by this kernel (child of the kernel)"
    assert left.origin is Origin.ELSEWHERE and not left.child_of_kernel
    assert left.stale and left.origin_text.startswith("stale: the notebook kernel it was started from (session ")
    assert left.summary.startswith(f"pid {orphan} ({Path(sys.executable).name} -c ")
    assert " has /dev/vfio/0 open, running " in left.summary
    assert left.summary.endswith(f", user {left.owner}, {left.origin_text}")


def test_the_shared_vfio_container_and_other_files_do_not_count(fake_tpu: FakeTpu) -> None:
    holder = fake_tpu.hold_as_child("vfio/vfio")

    assert holder not in {found.pid for found in tpu_device_holders(fake_tpu.view())}


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_process(
    root: Path,
    pid: int,
    parent: int,
    uid: int,
    cmdline: str = "",
    comm: str = "python3",
    holds: str = "",
    session: int = 1,
    started: int = 60,
    environ: str = "",
) -> None:
    """A process in a fake /proc: status, stat (in `session`, started `started` seconds after boot), cmdline, environ, comm and
    a device file it holds."""
    write(root, f"proc/{pid}/status", f"Name:\t{comm}\nState:\tS (sleeping)\nPPid:\t{parent}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    ticks = os.sysconf("SC_CLK_TCK")
    write(root, f"proc/{pid}/stat", f"{pid} ({comm}) S {parent} {pid} {session} " + " ".join(["0"] * 15) + f" {started * ticks} 0 0\n")
    write(root, f"proc/{pid}/cmdline", cmdline)
    write(root, f"proc/{pid}/environ", environ)
    write(root, f"proc/{pid}/comm", comm + "\n")
    if holds:
        (root / f"proc/{pid}/fd").mkdir(parents=True, exist_ok=True)
        os.symlink(holds, root / f"proc/{pid}/fd/9")


@pytest.fixture
def machine(tmp_path: Path) -> SystemView:
    """A fake /proc: init (1) > server (50) > kernel (100) > supervisor (110) > worker (111); and others besides."""
    write(tmp_path, "proc/stat", "cpu  1 2 3\nbtime 1764600000\n")
    fake_process(tmp_path, 1, 0, 0, "/sbin/init\0")
    fake_process(tmp_path, 50, 1, 1000, "jupyter-server\0", holds="/dev/accel3")
    fake_process(tmp_path, 100, 50, 1000, "python3\0-m\0ipykernel_launcher\0")
    fake_process(tmp_path, 110, 100, 1000, "python3\0-m\0ipykernel_launcher\0", holds="/dev/accel0")
    fake_process(tmp_path, 111, 110, 1000, "python3\0-m\0ipykernel_launcher\0", holds="/dev/accel1")
    long_line = "/usr/bin/python3\0train.py\0--output_dir\0" + "/very/long/path" * 20 + "\0"
    fake_process(tmp_path, 200, 1, 1000, long_line, holds="/dev/vfio/0")
    fake_process(tmp_path, 300, 1, 54321, "python3\0someone_elses.py\0", holds="/dev/vfio/1")
    fake_process(tmp_path, 400, 1, 1000, "", comm="zombie", holds="/dev/accel2")  # no command line
    return SystemView(environ={}, dev_root=tmp_path / "dev", proc_root=tmp_path / "proc", modules={}, own_pid=100, own_uid=1000)


def test_origins_owners_and_commands_from_a_fake_proc(machine: SystemView) -> None:
    holders = {holder.pid: holder for holder in tpu_device_holders(machine)}

    assert set(holders) == {50, 110, 111, 200, 300, 400}  # the kernel itself (100) is never listed
    assert holders[50].origin is Origin.KERNEL_ANCESTOR
    assert holders[50].origin_text == "this kernel runs under it"
    assert holders[110].origin_text == "started by this kernel (child of the kernel)"
    assert holders[111].origin is Origin.THIS_KERNEL
    assert holders[111].origin_text == "started by this kernel (under pid 110)"
    assert holders[200].origin is Origin.ELSEWHERE
    assert holders[200].command.startswith("python3 train.py --output_dir /very/long/path")
    assert len(holders[200].command) == COMMAND_WIDTH and holders[200].command.endswith("…")
    assert holders[300].uid == 54321
    assert holders[300].owner == "uid 54321"  # no such user here
    assert holders[400].command == "zombie"  # no command line: /proc/<pid>/comm names it
    assert holders[200].started_at == 1764600000 + 60
    assert holders[200].age == pytest.approx(holders[200].seen_at - holders[200].started_at)


def test_a_process_that_exited_while_we_looked_has_no_owner_and_counts_as_not_ours(machine: SystemView, tmp_path: Path) -> None:
    (tmp_path / "proc/200/status").unlink()
    (tmp_path / "proc/200/stat").unlink()

    (holder,) = [holder for holder in tpu_device_holders(machine) if holder.pid == 200]

    assert (holder.uid, holder.owner, holder.parent, holder.age) == (None, None, None, None)
    assert holder.origin is Origin.ELSEWHERE
    assert "running" not in holder.summary and "user" not in holder.summary


@pytest.mark.parametrize("path", ["/dev/accel0", "/dev/accel12", "/dev/vfio/0", "/dev/vfio/3"])
def test_tpu_device_files(path: str) -> None:
    assert is_tpu_device(path)


@pytest.mark.parametrize("path", ["/dev/vfio/vfio", "/dev/accel", "/dev/accel/accel0", "/dev/null", "/tmp/dev/accel0"])
def test_not_tpu_device_files(path: str) -> None:
    assert not is_tpu_device(path)


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0.4, "0s"), (42, "42s"), (185, "3m 05s"), (2 * 3600 + 7 * 60 + 5, "2h 07m"), (3 * 86400 + 4 * 3600 + 59, "3d 4h")],
)
def test_ages_as_a_person_says_them(seconds: float, said: str) -> None:
    assert describe_age(seconds) == said


KERNEL = "python3\0-m\0ipykernel_launcher\0-f\0/root/.local/share/jupyter/runtime/kernel-{}.json\0"


@pytest.fixture
def shared_machine(tmp_path: Path) -> SystemView:
    """A TPU VM with two notebooks and a terminal: this kernel (100, its own session), kernel B (500), and what they left."""
    write(tmp_path, "proc/stat", "cpu  1 2 3\nbtime 1764600000\n")
    fake_process(tmp_path, 1, 0, 0, "/sbin/init\0")
    fake_process(tmp_path, 50, 1, 0, "jupyter-server\0")
    fake_process(tmp_path, 100, 50, 0, KERNEL.format("a"), session=100)
    fake_process(tmp_path, 500, 50, 0, KERNEL.format("b"), session=500, holds="/dev/accel0")  # kernel B itself
    fake_process(tmp_path, 510, 500, 0, KERNEL.format("b"), session=500)  # B's run: its supervisor...
    fake_process(tmp_path, 511, 510, 0, KERNEL.format("b"), session=500, holds="/dev/accel1")  # ...and worker
    fake_process(tmp_path, 520, 1, 0, KERNEL.format("b"), session=500, holds="/dev/accel2")  # a worker B's ended run left
    fake_process(tmp_path, 600, 1, 0, KERNEL.format("c"), session=590, holds="/dev/accel3")  # a worker of a dead kernel
    # `nohup python train.py &` over SSH, then logging out: its shell gone, and its session's pid a newer process's now.
    fake_process(tmp_path, 700, 1, 0, "python3\0train.py\0", session=690, started=80, holds="/dev/accel4", environ="HOME=/root\0")
    fake_process(tmp_path, 690, 1, 0, "bash\0", session=690, started=120)
    # A script a dead kernel's cell started (`!python train.py &`): it carries the kernel's JPY_PARENT_PID.
    fake_process(tmp_path, 710, 1, 0, "python3\0train.py\0", session=705, holds="/dev/accel8", environ="HOME=/root\0JPY_PARENT_PID=50\0")
    fake_process(tmp_path, 801, 1, 0, "-bash\0", session=801)  # a terminal on the VM...
    fake_process(tmp_path, 800, 801, 0, "python3\0train.py\0", session=801, holds="/dev/accel5")  # ...training
    fake_process(tmp_path, 900, 1, 0, "python3\0train.py\0", session=100, holds="/dev/accel6")  # `!nohup ... &` from this notebook
    fake_process(tmp_path, 910, 1, 0, KERNEL.format("a"), session=100, holds="/dev/accel7")  # a worker this kernel's ended run left
    return SystemView(environ={}, dev_root=tmp_path / "dev", proc_root=tmp_path / "proc", modules={}, own_pid=100, own_uid=0)


def test_stale_holders_are_those_whose_notebook_kernel_is_gone_and_everything_else_is_live(shared_machine: SystemView) -> None:
    holders = {holder.pid: holder for holder in tpu_device_holders(shared_machine)}

    stale = {pid: holder.stale_because for pid, holder in holders.items() if holder.stale}
    live = {pid: holder.belongs_to for pid, holder in holders.items() if not holder.stale}
    assert stale == {
        520: "a copy forked from kernel pid 500 (kernel-b.json) that no longer runs under it (a worker of an ended run)",
        600: "the notebook kernel it was started from (session 590) has exited (it is a fork of that kernel: its command line)",
        710: "the notebook kernel it was started from (session 705) has exited (its environment holds the kernel's JPY_PARENT_PID)",
        910: "a copy forked from kernel pid 100 (kernel-a.json) that no longer runs under it (a worker of an ended run)",
    }
    assert live == {
        500: "another notebook kernel, kernel pid 500 (kernel-b.json)",
        511: "started from another notebook, kernel pid 500 (kernel-b.json)",
        700: "orphaned: the shell or program it was started from (session 690) has exited, and nothing shows a notebook kernel "
        "started it (a job left running on purpose, such as `nohup python train.py &` over SSH?)",
        800: "started from pid 801 (-bash), which still runs",
        900: "started from this notebook",
    }
    assert holders[511].origin_text == "live: started from another notebook, kernel pid 500 (kernel-b.json)"
    assert holders[600].origin_text == (
        "stale: the notebook kernel it was started from (session 590) has exited (it is a fork of that kernel: its command line)"
    )
    assert holders[600].session == 590


def test_a_kernel_whose_session_leader_is_outside_the_container_ends_only_its_own_ended_runs_workers(tmp_path: Path) -> None:
    # `docker exec`, and some notebook images, start the kernel in a session whose leader this pid namespace cannot see (0).
    write(tmp_path, "proc/stat", "cpu  1 2 3\nbtime 1764600000\n")
    fake_process(tmp_path, 1, 0, 0, "/sbin/init\0", session=0)
    fake_process(tmp_path, 100, 1, 0, KERNEL.format("a"), session=0)  # this kernel
    fake_process(tmp_path, 900, 1, 0, "python3\0train.py\0", session=0, holds="/dev/accel0")  # `!nohup ... &` from it
    fake_process(tmp_path, 910, 1, 0, KERNEL.format("a"), session=0, holds="/dev/accel1")  # a worker its ended run left
    fake_process(tmp_path, 920, 1, 0, KERNEL.format("d"), session=0, holds="/dev/accel2")  # another kernel's, seen the same way
    system = SystemView(environ={}, dev_root=tmp_path / "dev", proc_root=tmp_path / "proc", modules={}, own_pid=100, own_uid=0)

    holders = {holder.pid: holder for holder in tpu_device_holders(system)}

    assert (
        holders[910].stale_because
        == "a copy forked from kernel pid 100 (kernel-a.json) that no longer runs under it (a worker of an ended run)"
    )
    # Not called stale for a leader nobody here can see.
    assert (
        holders[900].belongs_to
        == holders[920].belongs_to
        == "started outside this container's view (its session's leader is not visible here)"
    )
    assert not holders[900].stale and not holders[920].stale


VS_CODE_KERNEL = "python3\0-m\0ipykernel_launcher\0--f=/root/.local/share/jupyter/runtime/kernel-v2-{}.json\0"


def test_a_kernel_started_without_a_session_of_its_own_is_live_while_its_launcher_runs(tmp_path: Path) -> None:
    # VS Code starts its kernels as plain children of its extension host (no new session), in the session of the SSH login
    # that started its server: once that shell is gone (session 45), a kernel and its runs are live as long as VS Code runs.
    write(tmp_path, "proc/stat", "cpu  1 2 3\nbtime 1764600000\n")
    fake_process(tmp_path, 1, 0, 0, "/sbin/init\0")
    fake_process(tmp_path, 30, 1, 0, "/lib/systemd/systemd\0--user\0", session=30)  # a subreaper, in a session of its own
    fake_process(tmp_path, 60, 1, 0, "node\0/root/.vscode-server/server-main.js\0", session=45)
    fake_process(tmp_path, 70, 60, 0, "node\0--type=extensionHost\0", session=45)
    fake_process(tmp_path, 300, 70, 0, VS_CODE_KERNEL.format(1), session=45, holds="/dev/accel0")  # a kernel using the TPU itself
    fake_process(tmp_path, 310, 300, 0, VS_CODE_KERNEL.format(1), session=45)  # its run's supervisor...
    fake_process(tmp_path, 311, 310, 0, VS_CODE_KERNEL.format(1), session=45, holds="/dev/accel1")  # ...and worker
    fake_process(tmp_path, 410, 1, 0, VS_CODE_KERNEL.format(2), session=45)  # a dead VS Code kernel's supervisor, adopted by init
    fake_process(tmp_path, 411, 410, 0, VS_CODE_KERNEL.format(2), session=45, holds="/dev/accel2")
    fake_process(tmp_path, 420, 30, 0, VS_CODE_KERNEL.format(3), session=45, holds="/dev/accel3")  # one a subreaper adopted
    fake_process(tmp_path, 100, 50, 0, KERNEL.format("a"), session=100)  # this kernel, a Jupyter server's
    system = SystemView(environ={}, dev_root=tmp_path / "dev", proc_root=tmp_path / "proc", modules={}, own_pid=100, own_uid=0)

    holders = {holder.pid: holder for holder in tpu_device_holders(system)}

    launcher = "started by pid 70 (node --type=extensionHost), which still runs, without a session of its own (its session's leader, 45, has exited)"
    assert (holders[300].belongs_to, holders[311].belongs_to) == (launcher, launcher)
    assert not holders[300].stale and not holders[311].stale
    assert (
        holders[411].stale_because
        == holders[420].stale_because
        == ("the notebook kernel it was started from (session 45) has exited (it is a fork of that kernel: its command line)")
    )
