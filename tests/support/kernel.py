"""A real Jupyter kernel (ipykernel, started by jupyter_client) driven by nbclient."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.util import run_sync
from support.processes import wait_until


@dataclass
class Kernel:
    """Runs cells one at a time in one live kernel; keeps the notebook it builds."""

    client: NotebookClient
    notebook: nbformat.NotebookNode
    log: Path | None = None  # the kernel process's stderr (ipykernel's own log), where started_kernel was asked to keep it

    def run(self, source: str, timeout: float = 120, allow_errors: bool = True) -> nbformat.NotebookNode:
        cell = nbformat.v4.new_code_cell(source)
        self.notebook.cells.append(cell)
        self.client.allow_errors = allow_errors
        self.client.timeout = timeout
        self.client.execute_cell(cell, len(self.notebook.cells) - 1)
        return cell

    def run_and_interrupt(self, source: str, when: str, timeout: float = 120) -> tuple[nbformat.NotebookNode, float]:
        """Run a cell and interrupt it once its output shows `when`; returns the cell and the interrupt time."""
        cell = nbformat.v4.new_code_cell(source)
        interrupted_at: list[float] = []

        def interrupt_when_ready() -> None:
            if wait_until(lambda: when in text_of(cell), timeout):
                interrupted_at.append(time.monotonic())
                self.interrupt()

        watcher = threading.Thread(target=interrupt_when_ready, daemon=True)
        watcher.start()
        self.notebook.cells.append(cell)
        self.client.allow_errors = True
        self.client.timeout = timeout
        self.client.execute_cell(cell, len(self.notebook.cells) - 1)
        watcher.join()
        assert interrupted_at, f"the cell never printed {when!r}: {text_of(cell)}"
        return cell, interrupted_at[0]

    def restart(self) -> None:
        """What Jupyter's "Restart kernel" does: a new kernel process, the notebook's variables gone."""
        run_sync(self.client.km.restart_kernel)(now=False)
        run_sync(self.client.kc.wait_for_ready)(timeout=60)

    def interrupt(self) -> None:
        """What Jupyter's stop button does: SIGINT to the kernel's process group."""
        os.killpg(os.getpgid(self.pid), signal.SIGINT)

    @property
    def pid(self) -> int:
        return self.client.km.provisioner.process.pid


@contextmanager
def started_kernel(log: Path | None = None, cwd: Path | None = None) -> Iterator[Kernel]:
    """A new kernel, as a notebook server starts one (in a session of its own), shut down on leaving; with `log`, the
    kernel process's stderr (ipykernel's log, kept across restarts) is appended there instead of pytest's; with `cwd`,
    it runs there (as a server starts it in the notebook's directory) instead of in pytest's."""
    notebook = nbformat.v4.new_notebook()
    client = NotebookClient(notebook, kernel_name="python3", timeout=120, allow_errors=True, store_widget_state=True)
    with ExitStack() as files:
        # nbclient hands these to the kernel manager's start_kernel, which hands them to the process's launch.
        launch: dict[str, object] = {} if log is None else {"stderr": files.enter_context(log.open("ab"))}
        if cwd is not None:
            launch["cwd"] = str(cwd)
        with client.setup_kernel(env=dict(os.environ, PJRT_DEVICE="CPU"), **launch):
            yield Kernel(client, notebook, log)


def text_of(cell: nbformat.NotebookNode) -> str:
    """Every stream, result and error text of an executed cell, joined."""
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("execute_result", "display_data"):
            parts.append(output.data.get("text/plain", ""))
        elif output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}\n" + "\n".join(output.traceback))
    return "".join(parts)


def shown(cell: nbformat.NotebookNode) -> str:
    """What a frontend shows for an executed cell: streams, results, and each error's traceback lines.

    As JupyterLab (and nbclient's coalesce_streams) do, consecutive outputs of one stream are joined, and text a
    carriage return goes back over on its line (a progress bar redrawn in place) is what it was overwritten by.
    """
    parts: list[str] = []
    stream = None
    for output in cell.get("outputs", []):
        if output.output_type == "stream" and output.name == stream:
            parts[-1] += output.text
            continue
        stream = output.name if output.output_type == "stream" else None
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("execute_result", "display_data"):
            parts.append(output.data.get("text/plain", "") + "\n")
        elif output.output_type == "error":
            parts.append("\n".join(output.traceback) + "\n")
    return plain("".join(_OVERWRITTEN.sub("", part) for part in parts))


_OVERWRITTEN = re.compile(r"[^\n]*\r(?=[^\n])")  # what nbclient's coalesce_streams removes


def plain(text: str) -> str:
    """Text without terminal colour codes (IPython colours its tracebacks)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def errors_of(cell: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [output for output in cell.get("outputs", []) if output.output_type == "error"]


def summary_of(cell: nbformat.NotebookNode) -> dict[str, str]:
    """The bundle of the run's end-of-run summary (the dashboard's place) in an executed cell."""
    [summary] = [
        output.data for output in cell.outputs if "text/html" in output.get("data", {}) and "tpu-nb-summary" in output.data["text/html"]
    ]
    return summary  # type: ignore[no-any-return]
