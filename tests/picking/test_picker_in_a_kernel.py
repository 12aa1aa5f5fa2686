"""The picker in a real Jupyter kernel: a click on "Insert training cell" reaches the frontend with the next run.

Frontends take `set_next_input` from the reply to an execute request; a
widget click is a comm message, which has no such reply. The picker's note
says so; this test pins the behaviour the note describes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel

from tpu_nb.recipes import TrainConfig, code_for


@pytest.fixture
def client(notebook_dir: Path) -> Iterator[BlockingKernelClient]:
    manager: KernelManager
    manager, client = start_new_kernel(
        kernel_name="python3", env=dict(os.environ, PJRT_DEVICE="CPU", HF_HUB_OFFLINE="1"), cwd=str(notebook_dir)
    )
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def execute(client: BlockingKernelClient, code: str) -> tuple[str, dict[str, Any]]:
    """Run a cell; return what it printed and its execute_reply content."""
    printed: list[str] = []

    def keep(message: dict[str, Any]) -> None:
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])

    reply = client.execute_interactive(code, timeout=120, output_hook=keep)
    return "".join(printed), reply["content"]


def test_an_inserted_cell_arrives_with_the_next_run(client: BlockingKernelClient) -> None:
    text, _ = execute(
        client,
        "from tpu_nb.picking import picker\np = picker()\np.fields['max_length'].value = 32\nprint(p.insert_button.model_id, p.problems)",
    )
    model_id, problems = re.fullmatch(r"([0-9a-f]{32}) (.*)\n", text).groups()  # type: ignore[union-attr]
    assert problems == "[]"
    click = client.session.msg("comm_msg", {"comm_id": model_id, "data": {"method": "custom", "content": {"event": "click"}}})
    client.shell_channel.send(click)
    text, reply = execute(client, "print(p.code.value == p.code.value.strip() + '\\n')")
    assert text == "True\n"
    expected = code_for(TrainConfig(model="./tiny-bert", max_length=32))
    assert reply["payload"] == [{"source": "set_next_input", "text": expected, "replace": False}]
    text, reply = execute(client, "print(p.note.value)")
    assert text.startswith("The cell will appear below the next cell you run")
    assert reply["payload"] == []
