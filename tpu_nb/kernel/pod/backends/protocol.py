"""What a pod backend does for a run: start it on every host, deliver requests to it (a stop, stacks), end it, fetch its results."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Protocol

from tpu_nb.wire.run_directory import RunDirectory


class PodBackend(Protocol):
    """A TPU VM slice through gcloud, or GKE through kubectl."""

    @property
    def label(self) -> str: ...

    @property
    def command(self) -> str:
        """The command-line tool it drives ("gcloud", "kubectl")."""
        ...

    def start(self, run: RunDirectory) -> subprocess.Popen[bytes]:
        """Copy the run to the hosts and start it on each: one local process whose output is every host's."""
        ...

    def deliver(self, run: RunDirectory, name: str, text: str) -> None:
        """Write request file `name` holding `text` in the run's directory on every host (`run_directory.request_shell`)."""
        ...

    def end(self, run_name: str) -> str:
        """End run `run_name` everywhere (on every host, in the cluster): this one, or one a dead kernel left; what the hosts
        said of it for the user (a `host.pgid` that outlived its host, ignored), or ""."""
        ...

    def end_commands(self, run_name: str) -> list[list[str]]:
        """The commands `end` runs (for the reaper, and for the user to run)."""
        ...

    def fetch_results(self, run: RunDirectory, into: Path) -> Path:
        """Copy rank 0's results into `into`; the local results directory."""
        ...

    def clean_up(self, run: RunDirectory) -> None:
        """What is left to do once the run ended (GKE: delete its JobSet)."""
        ...
