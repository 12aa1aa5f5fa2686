"""A read-only view of the machine (/proc, /sys, /dev, the environment, installed packages), from roots one can point elsewhere.

Everything here is stdlib only and never raises for the ordinary untidiness
of a live system: files that vanish, processes that exit mid-scan, and
/proc entries we may not read are skipped.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import NamedTuple


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def process_alive(pid: int) -> bool:
    """Whether a process with this pid exists (another user's counts; 0 and below never do)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def xla_runtime_started(modules: Mapping[str, object]) -> bool:
    """Whether this process has used an XLA device (torch_xla is asked only if `modules` holds it).

    Importing torch_xla here would cost every caller its import time.
    """
    torch_xla = modules.get("torch_xla")
    is_initialized = getattr(getattr(torch_xla, "_XLAC", None), "_xla_runtime_is_initialized", None)
    return callable(is_initialized) and bool(is_initialized())


def torch_tpu_backend_loaded(modules: Mapping[str, object]) -> bool:
    """Whether torch_tpu set up its device in this process (`import torch` imports torch_tpu even without a TPU, but
    registers the "tpu" device, loads libtpu's runtime and starts its threads only with one)."""
    return bool(getattr(modules.get("torch_tpu._loader"), "_LOADED", False))


def torch_tpu_runtime_started(modules: Mapping[str, object]) -> bool:
    """Whether this process has used a TPU through torch_tpu (asked only if `modules` holds its device backend).

    torch_tpu 0.2.0 then refuses the processes forked from it ("cannot access
    or re-initialize TPU in a forked subprocess"). Read from its sources
    (`_device_module.is_initialized`); not run on a TPU here.
    """
    backend = modules.get("torch_tpu._internal.device._device_ops_backend")
    is_initialized = getattr(backend, "_is_initialized", None)
    return callable(is_initialized) and bool(is_initialized())


class PciDevice(NamedTuple):
    """IDs of one PCI device as sysfs spells them, e.g. ("0x1ae0", "0x0063", "0x120000")."""

    vendor: str
    device: str
    device_class: str


class OpenedBy(NamedTuple):
    """A process that has some of the wanted paths open."""

    pid: int
    command: str | None
    paths: tuple[str, ...]


class ProcessStatus(NamedTuple):
    """What /proc/<pid>/status says about a process: its state letter ("S", "Z"...), parent and real user id."""

    state: str
    parent: int
    uid: int


@dataclass(frozen=True, slots=True)
class SystemView:
    """Where detection looks: environment, /sys, /dev, /proc, imports, packages."""

    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    sys_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")
    proc_root: Path = Path("/proc")
    modules: Mapping[str, object] = field(default_factory=lambda: sys.modules)
    package_version: Callable[[str], str | None] = installed_version
    own_pid: int = field(default_factory=os.getpid)
    own_uid: int = field(default_factory=os.getuid)

    @classmethod
    def current(cls) -> SystemView:
        """The machine this process runs on."""
        return cls()

    def read_text(self, path: Path) -> str | None:
        """The stripped content of a text file, or None when it cannot be read."""
        try:
            return path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return None

    def pci_devices(self) -> tuple[PciDevice, ...]:
        """All PCI devices listed under sys_root, in address order."""
        root = self.sys_root / "bus" / "pci" / "devices"
        devices = []
        for address in _sorted_entries(root):
            ids = [self.read_text(address / name) for name in ("vendor", "device", "class")]
            vendor, device, device_class = (value.lower() if value else "" for value in ids)
            if vendor:
                devices.append(PciDevice(vendor, device, device_class))
        return tuple(devices)

    def device_nodes(self, pattern: str) -> tuple[str, ...]:
        """Device nodes under dev_root matching a glob, named as on the viewed system ("/dev/...")."""
        names = (node.relative_to(self.dev_root).as_posix() for node in self.dev_root.glob(pattern))
        return tuple("/dev/" + name for name in sorted(names, key=_natural_order))

    def started_at(self) -> float | None:
        """When this machine, or this container, started (its first process), as a Unix time; None if /proc does not say.

        A hosted session (Kaggle's) is the container: its first process started with it.
        """
        return self.process_started_at(1)

    def process_started_at(self, pid: int) -> float | None:
        """When process `pid` started, as a Unix time; None if /proc does not say (or it exited)."""
        boot = next(
            (line.split()[1] for line in (self.read_text(self.proc_root / "stat") or "").splitlines() if line.startswith("btime ")), None
        )
        fields = self._stat_fields(pid)
        if boot is None or fields is None or not boot.isdecimal():
            return None
        return int(boot) + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time, in ticks since boot

    def process_start_ticks(self, pid: int) -> int | None:
        """When process `pid` started, in clock ticks after boot (None if it exited): with its pid, this names one process
        of this boot, which the pid alone does not once the process is gone and its number went to another."""
        fields = self._stat_fields(pid)
        return None if fields is None else int(fields[19])  # field 22: start time

    def own_pid_namespace(self) -> str | None:
        """Where this process's pid counts: its boot and pid namespace ("BOOT-ID pid:[4026531836]"), or None when /proc cannot
        say it, or is another pid namespace's (mounted from outside this one: what it says of a pid is not of ours)."""
        try:
            if os.readlink(self.proc_root / "self") != str(self.own_pid):
                return None
            namespace = os.readlink(self.proc_root / "self" / "ns" / "pid")
        except OSError:
            return None
        boot = self.read_text(self.proc_root / "sys" / "kernel" / "random" / "boot_id")
        return None if not boot else f"{boot} {namespace}"

    def process_session(self, pid: int) -> int | None:
        """The session process `pid` belongs to (the pid of the session's leader: a kernel, a shell), or None if it exited."""
        fields = self._stat_fields(pid)
        return None if fields is None else int(fields[3])  # field 6: session

    def process_cpu_seconds(self, pid: int) -> float | None:
        """CPU time process `pid` has used (user and system), or None if it exited."""
        fields = self._stat_fields(pid)
        return None if fields is None else (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # fields 14, 15

    def _stat_fields(self, pid: int) -> list[str] | None:
        """/proc/<pid>/stat from its third field on (the state), or None; the command name before it, in parentheses, may hold spaces and ")"."""
        stat = self.read_text(self.proc_root / str(pid) / "stat")
        return None if stat is None else stat[stat.rindex(")") + 2 :].split()

    def process_status(self, pid: int) -> ProcessStatus | None:
        """State, parent and owner of process `pid`, or None when it exited (or /proc does not say)."""
        status = self.read_text(self.proc_root / str(pid) / "status")
        if status is None:
            return None
        fields = {name: value.split() for name, _, value in (line.partition(":") for line in status.splitlines())}
        try:
            return ProcessStatus(fields["State"][0], int(fields["PPid"][0]), int(fields["Uid"][0]))  # Uid: real, effective, ...
        except (KeyError, IndexError, ValueError):
            return None  # not a status file as Linux writes it

    def command_line(self, pid: int) -> tuple[str, ...]:
        """The arguments process `pid` was started with; empty for kernel threads, zombies and exited processes."""
        try:
            raw = (self.proc_root / str(pid) / "cmdline").read_bytes()
        except OSError:
            return ()
        arguments = raw.decode("utf-8", errors="replace").split("\0")
        return tuple(arguments[:-1] if arguments[-1] == "" else arguments)  # each argument ends with a NUL

    def process_environment(self, pid: int) -> dict[str, str]:
        """The environment process `pid` was started with (as exec'd: a variable set later is not there); empty when it
        cannot be read (another user's process, an exited one)."""
        try:
            raw = (self.proc_root / str(pid) / "environ").read_bytes()
        except OSError:
            return {}
        pairs = (entry.partition("=") for entry in raw.decode("utf-8", errors="replace").split("\0") if entry)
        return {name: value for name, _, value in pairs}

    def named_as_viewed(self, path: str) -> str:
        """A path as the viewed machine names it: one under dev_root is "/dev/..." (so test device files count as devices)."""
        try:
            return "/dev/" + PurePosixPath(path).relative_to(self.dev_root).as_posix()
        except ValueError:
            return path

    def opened_by_other_processes(self, wanted: Callable[[str], bool], pids: Collection[int] | None = None) -> tuple[OpenedBy, ...]:
        """Processes other than ours (of `pids`, if given) holding open a path for which `wanted` is true.

        Reads the /proc/<pid>/fd symlinks; other users' processes are simply
        invisible without privileges, which is the best a notebook can do.
        """
        holders = []
        processes = _sorted_entries(self.proc_root) if pids is None else [self.proc_root / str(pid) for pid in sorted(pids)]
        for process in processes:
            if not process.name.isdecimal() or int(process.name) == self.own_pid:
                continue
            paths = sorted({path for path in map(self.named_as_viewed, _fd_targets(process / "fd")) if wanted(path)})
            if paths:
                command = self.read_text(process / "comm") or None
                holders.append(OpenedBy(int(process.name), command, tuple(paths)))
        return tuple(sorted(holders))


def _natural_order(name: str) -> list[str | int]:
    # accel2 before accel10, as a person would list them.
    return [int(part) if part.isdecimal() else part for part in re.split(r"(\d+)", name)]


def _sorted_entries(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir())
    except OSError:
        return []


def _fd_targets(fd_dir: Path) -> list[str]:
    targets = []
    for fd in _sorted_entries(fd_dir):
        try:
            targets.append(os.readlink(fd))
        except OSError:
            # The descriptor was closed or the process exited while we looked.
            continue
    return targets
