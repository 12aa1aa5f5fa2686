"""A Cloud TPU VM slice through `gcloud compute tpus tpu-vm`: check it, copy the run, start it on every host, send it requests.

Every command goes to all hosts at once (`--worker=all`), as PyTorch/XLA's
multi-host runtime needs: each host runs `train.py` from its copy of the run
directory under `~/tpu_nb_runs/`, and the stream of `--worker=all` output is
what the notebook follows. A request (a stop, stacks) and a kill are the run
directory's shell text (`tpu_nb.wire.run_directory`), run on every host through ssh.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tpu_nb.kernel.pod.backends import commands
from tpu_nb.kernel.pod.backends.slices import SliceError, TpuSlice, parse_slice
from tpu_nb.wire.run_directory import RESULTS, TRAIN_SCRIPT, RunDirectory, download_results, kill_shell, request_shell

REMOTE_RUNS = "tpu_nb_runs"  # under each host's home directory, private to its user
VERSIONS_MARKER = "@tpu_nb-versions "
# One line per host: its name, the versions every host must share with the notebook, and the
# tpu_nb runs with a live process there (a process whose working directory is the run's).
_VERSIONS_SCRIPT = f"""
import json, os, socket, importlib.metadata as m
found = lambda name: next((d.version for d in m.distributions(name=name)), None)
runs = os.path.realpath({REMOTE_RUNS!r})
running = set()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cwd = os.readlink(f"/proc/{{pid}}/cwd")
        state = open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        continue
    if os.path.dirname(cwd) == runs and state not in "ZX":
        running.add(os.path.basename(cwd))
record = {{"host": socket.gethostname(), "torch": found("torch"), "torch_xla": found("torch_xla"), "running": sorted(running)}}
print({VERSIONS_MARKER!r} + json.dumps(record))
"""


@dataclass(frozen=True, slots=True)
class HostVersions:
    """What one host said before a run: its packages, and the tpu_nb runs still running there."""

    host: str
    torch: str | None
    torch_xla: str | None
    running: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TpuVmSlice:
    """A TPU VM (one host or a pod slice) that gcloud can reach."""

    name: str
    zone: str | None = None
    project: str | None = None
    python: str = "python3"

    command = "gcloud"

    @property
    def label(self) -> str:
        return f"TPU VM {self.name}" + (f" ({self.zone})" if self.zone else "")

    def gcloud(self, verb: str, *args: str) -> list[str]:
        """`gcloud compute tpus tpu-vm VERB ARGS`, with this slice's zone and project, never prompting."""
        where = [*(["--zone", self.zone] if self.zone else []), *(["--project", self.project] if self.project else [])]
        return ["gcloud", "compute", "tpus", "tpu-vm", verb, *args, *where, "--quiet"]

    def ssh(self, command: str, worker: str = "all") -> list[str]:
        return self.gcloud("ssh", self.name, f"--worker={worker}", f"--command={command}")

    # What each step runs (also printed for an export).

    def copy_command(self, run: RunDirectory) -> list[str]:
        return self.gcloud("scp", "--recurse", str(run.path), f"{self.name}:{REMOTE_RUNS}/", "--worker=all")

    def start_command(self, run: RunDirectory) -> list[str]:
        # PJRT_DEVICE: the hosts' TPU unless their environment says otherwise.
        remote = shlex.quote(_remote(run.name))
        return self.ssh(f"cd {remote} && PJRT_DEVICE=${{PJRT_DEVICE:-TPU}} exec {self.python} {TRAIN_SCRIPT}")

    def deliver_command(self, run: RunDirectory, name: str, text: str) -> list[str]:
        return self.ssh(request_shell(_remote(run.name), name, text))

    def kill_command(self, run_name: str) -> list[str]:
        """End run `run_name` on every host: its process group there."""
        return self.ssh(kill_shell(_remote(run_name)))

    def fetch_command(self, run: RunDirectory, into: Path) -> list[str]:
        return self.gcloud("scp", "--recurse", f"{self.name}:{_remote(run.name)}/{RESULTS}", f"{into}/", "--worker=0")

    def prepare_command(self) -> list[str]:
        """The hosts' runs directory, made private (the cells may hold tokens)."""
        return self.ssh(f"mkdir -p {REMOTE_RUNS} && chmod 700 {REMOTE_RUNS}")

    # Preflight.

    def describe(self) -> TpuSlice:
        """The slice's shape from gcloud; `SliceError` (with the fix) when it is missing, not ready or odd."""
        try:
            found = json.loads(commands.run(self.gcloud("describe", self.name, "--format=json")))
        except commands.CommandFailed as error:
            raise SliceError(
                f"gcloud found no TPU VM named {self.name!r}{' in zone ' + self.zone if self.zone else ''}: check --zone and "
                f"--project, or create it (gcloud compute tpus tpu-vm create {self.name} --accelerator-type v5litepod-16 "
                f"--version v2-alpha-tpuv5-lite ...).\n{error}"
            ) from None
        state = found.get("state", "READY")
        if state != "READY":
            raise SliceError(f"TPU VM {self.name} is {state}, not READY: start it (gcloud compute tpus tpu-vm start {self.name}) and wait.")
        tpu = parse_slice(str(found.get("acceleratorType", "")))
        endpoints = len(found.get("networkEndpoints", [None] * tpu.hosts))  # one per host
        if endpoints != tpu.hosts:
            raise SliceError(f"TPU VM {self.name} is a {tpu.accelerator_type} ({tpu.hosts} hosts) but gcloud lists {endpoints} hosts.")
        return tpu

    def host_versions(self) -> list[HostVersions]:
        """torch, torch_xla and running tpu_nb runs on every host (and the private runs directory made there, on the way)."""
        command = f"mkdir -p {REMOTE_RUNS} && chmod 700 {REMOTE_RUNS} && {self.python} -c {shlex.quote(_VERSIONS_SCRIPT)}"
        output = commands.run(self.ssh(command))
        found = []
        for line in output.splitlines():
            if line.startswith(VERSIONS_MARKER):
                record = json.loads(line[len(VERSIONS_MARKER) :])
                found.append(HostVersions(str(record["host"]), record["torch"], record["torch_xla"], tuple(map(str, record["running"]))))
        return found

    # Running.

    def start(self, run: RunDirectory) -> subprocess.Popen[bytes]:
        commands.run(self.copy_command(run))
        return commands.start(self.start_command(run))

    def deliver(self, run: RunDirectory, name: str, text: str) -> None:
        commands.run(self.deliver_command(run, name, text))

    def kill(self, run: RunDirectory) -> None:
        self.end(run.name)

    def end(self, run_name: str) -> str:
        """End run `run_name` on every host; what they said of it (a `host.pgid` that outlived its host, ignored)."""
        said = commands.run(self.kill_command(run_name))
        return "\n".join(line for line in said.splitlines() if line.startswith("tpu_nb: "))

    def end_commands(self, run_name: str) -> list[list[str]]:
        """What `end` runs: for a notebook whose kernel may die, and for the user to run."""
        return [self.kill_command(run_name)]

    def fetch_results(self, run: RunDirectory, into: Path) -> Path:
        """Copy rank 0's results (from the run's gs:// location, or host 0) into `into`; the local results directory."""
        if run.run_url is not None:
            return download_results(run.run_url, into)
        commands.run(self.fetch_command(run, into))
        return into / RESULTS

    def clean_up(self, run: RunDirectory) -> None:
        """Nothing runs on the hosts any more; their copy of the run directory stays for a look."""


def _remote(run_name: str) -> str:
    """The run's directory on a host (relative to its home; quoted where a shell reads it, names are checked too)."""
    return f"{REMOTE_RUNS}/{run_name}"
