"""A simulated TPU VM slice for pod runs: the fake `gcloud` on PATH, its hosts as local processes."""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

FAKES = Path(__file__).resolve().parent


@dataclass
class SimulatedSlice:
    """The fake gcloud's state: its calls, its hosts' home directories."""

    root: Path
    name: str
    hosts: int

    def calls(self) -> list[list[str]]:
        path = self.root / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def home(self, host: int) -> Path:
        return self.root / f"host-{host}"

    def live_processes(self) -> list[str]:
        """Command lines of processes still running in a simulated host's directory."""
        found = []
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                cwd = os.readlink(entry / "cwd")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if cwd.startswith(str(self.root)) and state not in ("Z", "X"):
                found.append(cmdline)
        return found


def install_fake(tool: str, bin_dir: Path) -> None:
    """An executable `tool` on PATH that runs tests/support/fake_<tool>.py with this Python."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / tool
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKES / f"fake_{tool}.py"}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def simulate_slice(
    monkeypatch: pytest.MonkeyPatch,
    root: Path,
    name: str = "my-slice",
    accelerator: str = "v4-16",
    hosts: int = 2,
    processes_per_host: int | None = None,
) -> SimulatedSlice:
    """Put the fake gcloud first on PATH (and this Python's `python3` next), simulating `name`.

    With `processes_per_host`, the hosts' train.py join one world of a process per device
    (`support.process_world`), so collectives keep them in lock-step as on a real slice.
    """
    root.mkdir(parents=True, exist_ok=True)
    if processes_per_host is not None:
        monkeypatch.setenv("PYTHONPATH", str(FAKES / "world_site"))
        monkeypatch.setenv("TPU_NB_TEST_WORLD_HOSTS", str(hosts))
        monkeypatch.setenv("TPU_NB_TEST_WORLD_STORE", str(root / "world-store"))
        monkeypatch.setenv("CPU_NUM_DEVICES", str(processes_per_host))
    install_fake("gcloud", root / "bin")
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GCLOUD_ROOT", str(root))
    monkeypatch.setenv("FAKE_GCLOUD_TPU", name)
    monkeypatch.setenv("FAKE_GCLOUD_ACCELERATOR", accelerator)
    monkeypatch.setenv("FAKE_GCLOUD_HOSTS", str(hosts))
    return SimulatedSlice(root, name, hosts)


@dataclass
class SimulatedCluster:
    """The fake kubectl's state: its calls, the manifests applied, the pods' directories."""

    root: Path

    def calls(self, namespace: str = "default") -> list[list[str]]:
        """Every call's arguments after the namespace flag, which each must give first."""
        path = self.root / "calls.jsonl"
        calls = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        assert all(call[0] == f"--namespace={namespace}" for call in calls), calls
        return [call[1:] for call in calls]

    def live_processes(self) -> list[str]:
        return SimulatedSlice(self.root, "", 0).live_processes()

    def objects(self) -> list[str]:
        """What is in the cluster: "configmap-NAME", "jobset-NAME"."""
        objects = self.root / "objects"
        return sorted(path.name for path in objects.iterdir()) if objects.exists() else []


def simulate_gke(monkeypatch: pytest.MonkeyPatch, root: Path, nodes: int) -> SimulatedCluster:
    """Put the fake kubectl first on PATH, with a cluster of `nodes` TPU nodes."""
    root.mkdir(parents=True, exist_ok=True)
    install_fake("kubectl", root / "bin")
    monkeypatch.setenv("PATH", f"{root / 'bin'}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_KUBECTL_ROOT", str(root))
    monkeypatch.setenv("FAKE_KUBECTL_NODES", str(nodes))
    return SimulatedCluster(root)
