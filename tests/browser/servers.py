"""Throwaway notebook servers for the browser tests (JupyterLab 4, classic Notebook 6), always stopped."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from support.processes import descendants, wait_until

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/lib/chromium/chromium")  # Debian's binary; /usr/bin/chromium is a wrapper script
CHROMIUM_ARGS = [
    "--no-sandbox",  # we run as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SERVER_START_SECONDS = 60
SERVER_STOP_SECONDS = 20

# Per-user JupyterLab settings for the test server only. fetchNews "false"
# stops the "Jupyter news" toast (which covers part of the screenshot) and any
# request to the news feed.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}


@dataclass
class NotebookServer:
    """A JupyterLab or classic Notebook server on 127.0.0.1 serving `root_dir`, reachable with `token`."""

    process: subprocess.Popen[bytes]
    port: int
    token: str
    root_dir: Path
    log_path: Path
    page_prefix: str  # "lab/tree" (JupyterLab) or "notebooks" (classic Notebook)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def notebook_url(self, path: str) -> str:
        """The address that opens `path` (relative to root_dir), logged in by token."""
        return f"{self.base_url}/{self.page_prefix}/{path}?token={self.token}"

    def api(self, path: str, method: str = "GET", timeout: float = 10) -> Any:
        """Call the server's REST API; returns the decoded JSON (None for an empty body)."""
        request = urllib.request.Request(
            f"{self.base_url}/api/{path}",
            data=b"" if method == "POST" else None,
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_jupyterlab(base: Path, notebooks: list[Path]) -> NotebookServer:
    """JupyterLab 4 from this environment, on a copy of `notebooks`."""
    home = base / "jupyter"
    settings_dir = home / "settings"
    for name, values in LAB_SETTINGS.items():
        (settings_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (settings_dir / name).write_text(json.dumps(values))
    port, token = free_port(), secrets.token_hex(16)
    command = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",  # fail rather than quietly serve on another port
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={base / 'root'}",
        "--ServerApp.allow_root=True",  # CI runs as root; JupyterLab refuses that otherwise
        f"--LabApp.workspaces_dir={home / 'workspaces'}",
        f"--LabApp.user_settings_dir={settings_dir}",
    ]  # fmt: skip
    return _start(base, notebooks, command, port, token, "lab/tree")


def start_classic_notebook(base: Path, notebooks: list[Path], python: str) -> NotebookServer:
    """The classic Notebook (6.x) of the environment of `python`: server, kernel and widget frontend all from there.

    That frontend is the ipywidgets 7 one (widgetsnbextension 3.x), which
    JupyterLab 4's widget manager is not: it renders protocol 2 only.
    """
    port, token = free_port(), secrets.token_hex(16)
    command = [
        python, "-m", "notebook", "--no-browser",
        "--NotebookApp.ip=127.0.0.1", f"--NotebookApp.port={port}",
        "--NotebookApp.port_retries=0",
        f"--NotebookApp.token={token}",
        f"--NotebookApp.notebook_dir={base / 'root'}",
        "--NotebookApp.allow_root=True",
    ]  # fmt: skip
    return _start(base, notebooks, command, port, token, "notebooks")


def _start(base: Path, notebooks: list[Path], command: list[str], port: int, token: str, page_prefix: str) -> NotebookServer:
    """Start a server on a copy of `notebooks` (outputs cleared) and wait until its API answers."""
    root_dir, home = base / "root", base / "jupyter"
    root_dir.mkdir()
    for source in notebooks:
        # Cleared, so outputs ever committed with the notebook cannot pass for this run's.
        notebook = nbformat.read(source, as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(notebook, root_dir / source.name)
    # Config, runtime files, workspaces and settings in the temp dir: the user's
    # own (e.g. a saved workspace reopening another notebook) must not leak in.
    env = dict(
        os.environ,
        PJRT_DEVICE="CPU",
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
    )
    log_path = base / "server.log"
    with log_path.open("wb") as log:
        # Its own session: on a failed graceful stop we can signal the whole group.
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = NotebookServer(process, port, token, root_dir, log_path, page_prefix)

    def answers() -> bool:
        if process.poll() is not None:
            return True  # exited: stop waiting and report below
        try:
            server.api("status", timeout=2)
        except (OSError, urllib.error.URLError):
            return False
        return True

    wait_until(answers, SERVER_START_SECONDS, interval=0.25)
    if process.poll() is not None or not answers():
        stop_server(server)
        pytest.fail(f"{command[1:4]} did not answer on port {port} within {SERVER_START_SECONDS} s:\n{server.log_tail()}")
    return server


def stop_server(server: NotebookServer) -> None:
    """Shut the server and its kernels down; kill whatever is left, so no process outlives the test."""
    # Kernels run in sessions of their own (jupyter_client), outside the
    # server's process group: note them now, to check on them afterwards.
    kernel_side = descendants(server.process.pid)
    if server.process.poll() is None:
        try:
            server.api("shutdown", method="POST")  # graceful: shuts the kernels down too
        except (OSError, urllib.error.URLError):
            pass  # already stopping or unresponsive: the signals below handle it
        try:
            server.process.wait(SERVER_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(server.process.pid, sig)
                    server.process.wait(10)
                    break
                except ProcessLookupError:
                    break  # the group is gone
                except subprocess.TimeoutExpired:
                    continue
    for pid in kernel_side:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # exited with the server, as it should
    wait_until(lambda: not any(_alive(pid) for pid in kernel_side), 10)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"
