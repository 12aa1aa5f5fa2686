"""A pod run's directory: the format the notebook writes and every host reads, in both directions.

    <run>/train.py        the recorded cells and the training cell as one program (`TRAIN_SCRIPT`)
    <run>/manifest.json   the run's options and the notebook's versions (`Manifest`)
    <run>/tpu_nb/         a copy of tpu_nb, so the hosts need only torch, torch_xla and the cells' libraries
    <run>/stop            the graceful stop, delivered to every host: the step to stop at and why (`stop_text`)
    <run>/stacks-request  a request for every worker's stacks: its number, each new one higher (`request_shell`)
    <run>/host.pgid       the process group a host's run leads and its leader's start, for the hard stop (`kill_shell`)
    <run>/results/        rank 0's results (`tpu_nb.wire.results`), copied to the run's gs:// location

The notebook writes the directory (`tpu_nb.kernel.pod.program`), copies it
to the hosts and writes `stop` and `stacks-request` there through gcloud or
kubectl; each host's `train.py` (`tpu_nb.workers.processes.pod_host`) reads the manifest,
watches for those requests and writes `host.pgid` and `results/`.
"""

from __future__ import annotations

import datetime
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpu_nb.wire.mesh import MeshShape
from tpu_nb.wire.stacks import WatchdogSetting
from tpu_nb.wire.stop_reason import StopReason

TRAIN_SCRIPT = "train.py"
MANIFEST = "manifest.json"
STOP_FILE = "stop"
STACKS_REQUEST_FILE = "stacks-request"
GROUP_FILE = "host.pgid"
RESULTS = "results"
MATCHED_PACKAGES = ("torch", "torch_xla")
"""Packages every host must have at the notebook's version: a mismatch breaks the run, or its results."""


@dataclass(frozen=True, slots=True)
class Cell:
    """A notebook cell as `train.py` holds it: its name, its magic line, its code from line 2."""

    name: str  # "In [3]", as the notebook showed it
    magic: str  # "%%tpu_prepare", line 1 of the cell as written
    source: str

    @classmethod
    def block(cls, name: str, magic: str, source: str) -> Cell:
        """From `train.py`'s literal, which opens and closes with a newline of its own to read as code."""
        return cls(name, magic, source.removeprefix("\n").removesuffix("\n"))

    def lines_as_written(self) -> list[str]:
        return [self.magic + "\n", *(line + "\n" for line in self.source.split("\n"))]


@dataclass(frozen=True, slots=True)
class RunDirectory:
    """A written run directory, and where its copy lives on the hosts' side."""

    path: Path
    name: str  # the run's name: also its directory's name on the hosts
    hosts: int
    run_url: str | None  # the run's copy at gs://... (results in its results/), if it has one
    cells: tuple[Cell, ...] = ()  # the prepared cells and the training cell, as train.py holds them


@dataclass(frozen=True, slots=True)
class Manifest:
    """`manifest.json`: the run as the notebook planned it, and the notebook's package versions."""

    name: str
    hosts: int
    devices: int
    return_names: tuple[str, ...]
    mesh: MeshShape | None  # an SPMD run's mesh
    doctor: bool
    compile_cache: str | None
    watchdog: WatchdogSetting | None  # None: --watchdog off
    run_url: str | None
    python: str
    packages: dict[str, str | None]  # the notebook's versions

    def write(self, directory: Path) -> None:
        record = {
            "format": 1,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "run": {
                "name": self.name,
                "hosts": self.hosts,
                "devices": self.devices,
                "return_names": list(self.return_names),
                "mesh": None if self.mesh is None else str(self.mesh),
                "doctor": self.doctor,
                "compile_cache": self.compile_cache,
                "watchdog": "off" if self.watchdog is None else self.watchdog.seconds,  # null: learned from the run
                "run_url": self.run_url,
            },
            "notebook": {"python": self.python, "packages": self.packages},
        }
        (directory / MANIFEST).write_text(json.dumps(record, indent=2) + "\n")

    @classmethod
    def read(cls, directory: Path) -> Manifest:
        record: dict[str, Any] = json.loads((directory / MANIFEST).read_text())
        run, notebook = record["run"], record["notebook"]
        return cls(
            name=str(run["name"]),
            hosts=int(run["hosts"]),
            devices=int(run["devices"]),
            return_names=tuple(run["return_names"]),
            mesh=None if run["mesh"] is None else MeshShape.parse(run["mesh"]),
            doctor=bool(run["doctor"]),
            compile_cache=run["compile_cache"],
            watchdog=None if run["watchdog"] == "off" else WatchdogSetting(run["watchdog"]),
            run_url=run["run_url"],
            python=str(notebook["python"]),
            packages=dict(notebook["packages"]),
        )


def request_shell(directory: str, name: str, text: str) -> str:
    """Shell text that writes request file `name` (`STOP_FILE`, `STACKS_REQUEST_FILE`) holding `text` on a host, all at once."""
    path = shlex.quote(f"{directory}/{name}")
    return f"echo {shlex.quote(text)} > {path}.partial && mv {path}.partial {path}"


def stop_text(step: int | None, reason: StopReason) -> str:
    """The stop file's words: the step to stop at ("-": each host's one past its furthest rank), and the reason's code."""
    return f"{'-' if step is None else int(step)} {reason.value}"


def read_stop(directory: Path) -> tuple[StopReason | None, int | None]:
    """On a host: (why a stop was asked, None if none was; at which step, or None for "one past the furthest rank")."""
    try:
        text = (directory / STOP_FILE).read_text()
    except FileNotFoundError:
        return None, None
    step, _, code = text.strip().partition(" ")
    try:
        reason = StopReason(int(code))
    except ValueError:  # written whole by the notebook's `stop_text` (the hosts run its copy): never, but still a stop
        reason = StopReason.USER
    return reason, int(step) if step.isdecimal() else None


def read_stacks_request(directory: Path) -> int | None:
    """On a host: the number of the newest stacks request, if any."""
    try:
        text = (directory / STACKS_REQUEST_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.isdecimal() else None


def kill_shell(directory: str) -> str:
    """Shell text that ends a host's run at once: its process group (`host.pgid`), SIGTERM then SIGKILL.

    Only while that group is still the run's: its leader runs, as the same process that wrote the file (the same
    start, /proc/PID/stat's field 22; a group's id is its leader's pid, which goes to another process once the
    leader is gone). A file that outlived its host is said and ignored: nothing is signalled.
    """
    return (
        f"{{ cd {shlex.quote(directory)} 2>/dev/null && test -f {GROUP_FILE}; }} || exit 0; "
        f"read group started < {GROUP_FILE}; "
        'case "$group" in ""|*[!0-9]*) group=0;; esac; '
        # The fields after the command's name (in parentheses, which may hold spaces): the start is the 20th.
        'stat=$(cat /proc/$group/stat 2>/dev/null); set -- ${stat##*") "}; '
        'if [ "$group" != 0 ] && [ -n "$started" ] && [ "${20}" = "$started" ]; then '
        # `kill -SIG -PGID`, without `--`: dash (Debian's sh) refuses `--` there, bash takes both.
        "kill -TERM -$group 2>/dev/null; sleep 2; kill -KILL -$group 2>/dev/null; "
        f'else echo "tpu_nb: {GROUP_FILE} in $(pwd) on $(hostname) names process group $group, which is no longer this run '
        '(its leader has exited, or its pid now belongs to another process): nothing was signalled."; fi'
    )


def write_group(directory: Path, pgid: int, started: int) -> None:
    """On a host: the process group its run leads, and when its leader started (clock ticks after boot), for `kill_shell`."""
    (directory / GROUP_FILE).write_text(f"{pgid} {started}\n")


def forget_group(directory: Path) -> None:
    """On a host whose run ended: no group to end any more."""
    (directory / GROUP_FILE).unlink(missing_ok=True)


def upload(local: Path, url: str) -> None:
    """Copy a directory (the run, or a host's results) to `url` (gs:// through gcsfs; any fsspec URL)."""
    import fsspec

    filesystem, root = fsspec.core.url_to_fs(url)
    for path in sorted(local.rglob("*")):
        if path.is_file():
            target = f"{root}/{path.relative_to(local).as_posix()}"
            filesystem.makedirs(target.rsplit("/", 1)[0], exist_ok=True)  # a bucket has no directories: nothing to do there
            filesystem.put_file(str(path), target)


def download_results(run_url: str, into: Path) -> Path:
    """Copy the results host 0 saved under `run_url` (its `results/`) into `into`; the local results directory."""
    import fsspec

    filesystem, root = fsspec.core.url_to_fs(f"{run_url.rstrip('/')}/{RESULTS}")
    local = into / RESULTS
    local.mkdir(parents=True, exist_ok=True)
    for remote in filesystem.ls(root, detail=False):
        filesystem.get_file(remote, str(local / Path(remote).name))
    return local
