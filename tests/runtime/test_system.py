from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from support.processes import wait_until

from tpu_nb.runtime import SystemView
from tpu_nb.runtime.system import OpenedBy, PciDevice, ProcessStatus, installed_version


def write(root: Path, relative: str, text: str = "") -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def link(root: Path, relative: str, target: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def view(root: Path, own_pid: int = 1) -> SystemView:
    return SystemView(environ={}, sys_root=root / "sys", dev_root=root / "dev", proc_root=root / "proc", modules={}, own_pid=own_pid)


def test_read_text_strips_and_returns_none_for_missing_files(tmp_path: Path) -> None:
    write(tmp_path, "vendor", "0x1AE0\n")

    assert view(tmp_path).read_text(tmp_path / "vendor") == "0x1AE0"
    assert view(tmp_path).read_text(tmp_path / "gone") is None
    assert view(tmp_path).read_text(tmp_path) is None  # a directory


def test_pci_devices_are_read_in_address_order_and_lowercased(tmp_path: Path) -> None:
    devices = tmp_path / "sys" / "bus" / "pci" / "devices"
    write(devices, "0000:00:05.0/vendor", "0x1AE0\n")
    write(devices, "0000:00:05.0/device", "0x0063\n")
    write(devices, "0000:00:05.0/class", "0x120000\n")
    write(devices, "0000:00:00.0/vendor", "0x8086\n")
    write(devices, "0000:00:00.0/device", "0x1237\n")  # no class file
    (devices / "0000:00:09.0").mkdir()  # vanished while we looked: no vendor file

    assert view(tmp_path).pci_devices() == (
        PciDevice("0x8086", "0x1237", ""),
        PciDevice("0x1ae0", "0x0063", "0x120000"),
    )


def test_pci_devices_without_sysfs_is_empty(tmp_path: Path) -> None:
    assert view(tmp_path).pci_devices() == ()


def test_device_nodes_are_named_as_on_the_machine_in_natural_order(tmp_path: Path) -> None:
    for name in ("accel10", "accel2", "accel0", "vfio/vfio", "vfio/1", "null"):
        write(tmp_path, f"dev/{name}")

    system = view(tmp_path)
    assert system.device_nodes("accel*") == ("/dev/accel0", "/dev/accel2", "/dev/accel10")
    assert system.device_nodes("vfio/*") == ("/dev/vfio/1", "/dev/vfio/vfio")
    assert system.device_nodes("nvidia*") == ()


def test_opened_by_other_processes_skips_ourselves_and_vanished_processes(tmp_path: Path) -> None:
    link(tmp_path, "proc/300/fd/4", "/dev/accel1")
    link(tmp_path, "proc/300/fd/3", "/dev/accel0")
    link(tmp_path, "proc/300/fd/5", "/dev/accel0")  # the same node twice is reported once
    write(tmp_path, "proc/300/comm", "python3\n")
    link(tmp_path, "proc/20/fd/1", "/dev/accel0")  # ourselves
    (tmp_path / "proc" / "21").mkdir()  # exited: no fd directory left
    link(tmp_path, "proc/self/fd/1", "/dev/accel0")  # not a pid
    link(tmp_path, "proc/22/fd/0", "/dev/null")

    holders = view(tmp_path, own_pid=20).opened_by_other_processes(lambda path: path.startswith("/dev/accel"))

    assert holders == (OpenedBy(pid=300, command="python3", paths=("/dev/accel0", "/dev/accel1")),)


def test_unreadable_descriptors_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    link(tmp_path, "proc/300/fd/3", "/dev/accel0")
    link(tmp_path, "proc/301/fd/3", "/dev/accel1")
    real_readlink = os.readlink

    def readlink(path: str | os.PathLike[str]) -> str:
        # Root can read every fd here, so fake what an ordinary user meets.
        if "/300/" in os.fspath(path):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_readlink(path)

    monkeypatch.setattr(os, "readlink", readlink)

    holders = view(tmp_path).opened_by_other_processes(lambda path: path.startswith("/dev/accel"))

    assert holders == (OpenedBy(pid=301, command=None, paths=("/dev/accel1",)),)


def test_opened_by_other_processes_on_the_real_proc(tmp_path: Path) -> None:
    held = tmp_path / "held.txt"
    held.write_text("x")
    with held.open() as ours, subprocess.Popen(["sleep", "30"], stdin=ours) as child:
        try:
            holders = SystemView.current().opened_by_other_processes(lambda path: path == str(held))
        finally:
            child.kill()

    # We hold the file too, but only the child is "another process".
    assert holders == (OpenedBy(pid=child.pid, command="sleep", paths=(str(held),)),)


def test_installed_version() -> None:
    assert installed_version("pytest") == pytest.__version__
    assert installed_version("surely-not-an-installed-distribution") is None


def test_current_views_this_machine() -> None:
    system = SystemView.current()

    assert system.environ is os.environ
    assert system.sys_root == Path("/sys")
    assert system.own_pid == os.getpid()
    assert system.package_version("pytest") == pytest.__version__


def test_started_at_is_when_the_first_process_started(tmp_path: Path) -> None:
    (tmp_path / "proc" / "1").mkdir(parents=True)
    (tmp_path / "proc" / "stat").write_text("cpu  1 2 3\nbtime 1764600000\nprocesses 42\n")
    ticks = os.sysconf("SC_CLK_TCK")
    fields = ["S"] + ["0"] * 18 + [str(90 * ticks)]  # field 22 (start time) is the 20th after the name
    (tmp_path / "proc" / "1" / "stat").write_text("1 (tini (a name with spaces)) " + " ".join(fields) + " 0 0\n")
    assert view(tmp_path).started_at() == 1764600000 + 90
    (tmp_path / "proc" / "stat").write_text("cpu  1 2 3\n")
    assert view(tmp_path).started_at() is None


def test_started_at_on_this_machine_is_in_the_past() -> None:
    started = SystemView.current().started_at()
    assert started is not None and started <= time.time()


def test_process_status_command_line_and_start_of_a_real_process() -> None:
    with subprocess.Popen(["sleep", "30"]) as child:
        try:
            system = SystemView.current()
            # /proc may show the forked copy of us for a moment before its exec.
            assert wait_until(lambda: system.command_line(child.pid) == ("sleep", "30"), timeout=10, interval=0.01)
            status = system.process_status(child.pid)
            arguments = system.command_line(child.pid)
            started = system.process_started_at(child.pid)
        finally:
            child.kill()

    assert status is not None and status.state in "RSD"  # running, or sleeping once exec'd
    assert status == ProcessStatus(state=status.state, parent=os.getpid(), uid=os.getuid())
    assert arguments == ("sleep", "30")
    assert started is not None and time.time() - 30 < started <= time.time()


def test_a_processs_environment_is_the_one_it_was_started_with() -> None:
    with subprocess.Popen(["sleep", "30"], env={"JPY_PARENT_PID": "12", "ODD": "a=b"}) as child:
        try:
            system = SystemView.current()
            assert wait_until(lambda: system.command_line(child.pid) == ("sleep", "30"), timeout=10, interval=0.01)
            assert system.process_environment(child.pid) == {"JPY_PARENT_PID": "12", "ODD": "a=b"}
        finally:
            child.kill()
    assert SystemView.current().process_environment(child.pid) == {}  # exited


def test_process_facts_of_an_exited_or_odd_process_are_none(tmp_path: Path) -> None:
    write(tmp_path, "proc/7/status", "Name:\tx\nState:\tS (sleeping)\n")  # no PPid or Uid line
    write(tmp_path, "proc/8/cmdline", "")  # a kernel thread, or a zombie

    system = view(tmp_path)
    assert system.process_status(7) is None
    assert system.process_status(9) is None
    assert system.command_line(8) == ()
    assert system.command_line(9) == ()
    assert system.process_started_at(9) is None


def test_where_this_processs_pid_counts_is_its_boot_and_pid_namespace_unless_proc_is_another_namespaces(tmp_path: Path) -> None:
    here = SystemView.current().own_pid_namespace()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert here == f"{boot} {os.readlink('/proc/self/ns/pid')}"
    assert SystemView.current().process_start_ticks(os.getpid()) == int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    # A /proc mounted from another pid namespace: its "self" is another number than our pid, and nothing it says is of ours.
    write(tmp_path, "proc/sys/kernel/random/boot_id", boot)
    (tmp_path / "proc/1/ns").mkdir(parents=True)
    os.symlink("pid:[4026531836]", tmp_path / "proc/1/ns/pid")
    os.symlink("1", tmp_path / "proc/self")  # as /proc/self reads: the looking process's pid in that /proc
    assert SystemView(proc_root=tmp_path / "proc", own_pid=1).own_pid_namespace() == f"{boot} pid:[4026531836]"
    assert SystemView(proc_root=tmp_path / "proc", own_pid=4242).own_pid_namespace() is None


def test_command_line_keeps_arguments_with_spaces(tmp_path: Path) -> None:
    write(tmp_path, "proc/7/cmdline", "python3\0-c\0import time; time.sleep(9)\0")

    assert view(tmp_path).command_line(7) == ("python3", "-c", "import time; time.sleep(9)")


def test_files_under_dev_root_are_named_as_device_files(tmp_path: Path) -> None:
    system = view(tmp_path)
    assert system.named_as_viewed(str(tmp_path / "dev" / "vfio" / "0")) == "/dev/vfio/0"
    assert system.named_as_viewed("/dev/accel0") == "/dev/accel0"
    assert system.named_as_viewed("pipe:[4711]") == "pipe:[4711]"
    link(tmp_path, "proc/300/fd/3", str(tmp_path / "dev" / "accel0"))

    holders = system.opened_by_other_processes(lambda path: path == "/dev/accel0")

    assert holders == (OpenedBy(pid=300, command=None, paths=("/dev/accel0",)),)


def test_a_process_is_alive_while_it_runs_and_not_once_reaped() -> None:
    import os
    import subprocess

    from tpu_nb.runtime.system import process_alive

    child = subprocess.Popen(["sleep", "30"])
    assert process_alive(child.pid) and process_alive(os.getpid())
    child.kill()
    child.wait()
    assert not process_alive(child.pid) and not process_alive(0) and not process_alive(-1)
