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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple


def installed_version(distribution: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def xla_runtime_started(modules: Mapping[str, object]) -> bool:
    """Whether this process has used an XLA device (torch_xla is asked only if `modules` holds it).

    Importing torch_xla here would cost every caller its import time.
    """
    torch_xla = modules.get("torch_xla")
    is_initialized = getattr(getattr(torch_xla, "_XLAC", None), "_xla_runtime_is_initialized", None)
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
        boot = next(
            (line.split()[1] for line in (self.read_text(self.proc_root / "stat") or "").splitlines() if line.startswith("btime ")), None
        )
        first = self.read_text(self.proc_root / "1" / "stat")
        if boot is None or first is None or not boot.isdigit():
            return None
        fields = first[first.rindex(")") + 2 :].split()
        return int(boot) + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time, in ticks since boot

    def opened_by_other_processes(self, wanted: Callable[[str], bool]) -> tuple[OpenedBy, ...]:
        """Processes other than ours holding open a path for which `wanted` is true.

        Reads the /proc/<pid>/fd symlinks; other users' processes are simply
        invisible without privileges, which is the best a notebook can do.
        """
        holders = []
        for process in _sorted_entries(self.proc_root):
            if not process.name.isdigit() or int(process.name) == self.own_pid:
                continue
            paths = sorted({target for target in _fd_targets(process / "fd") if wanted(target)})
            if paths:
                command = self.read_text(process / "comm") or None
                holders.append(OpenedBy(int(process.name), command, tuple(paths)))
        return tuple(sorted(holders))


def _natural_order(name: str) -> list[str | int]:
    # accel2 before accel10, as a person would list them.
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


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
