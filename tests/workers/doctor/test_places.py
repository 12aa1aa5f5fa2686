"""Naming a frame of the user's code the way the notebook names it."""

from __future__ import annotations

import linecache
from types import SimpleNamespace

import pytest

from tpu_nb.workers.doctor import places
from tpu_nb.workers.doctor.analysis_log import Frame
from tpu_nb.workers.doctor.places import describe, first_user_frame

TORCH_XLA = Frame("sync", "/venv/lib/python3.11/site-packages/torch_xla/torch_xla.py", 87)


def test_the_first_frame_outside_libraries_and_tpu_nb_is_the_users() -> None:
    own = Frame("run", first_user_frame.__code__.co_filename, 10)
    cell = Frame("<module>", "/tmp/ipykernel_7/2071.py", 4)
    assert first_user_frame((TORCH_XLA, own, cell)) == cell
    assert first_user_frame((TORCH_XLA, own)) is None


def test_an_ipython_7_cell_is_named_by_its_prompt_number_with_its_source() -> None:
    filename = "<ipython-input-4-0f3c9a1b2d3e>"
    linecache.cache[filename] = (0, None, ["%%tpu_train\n", "x = 1\n", "    value = loss.item()   \n"], filename)
    assert describe(Frame("<module>", filename, 3)) == "In [4], line 3: value = loss.item()"


def test_a_file_is_named_by_its_name_and_long_lines_are_cut() -> None:
    filename = "/home/me/project/train.py"
    linecache.cache[filename] = (0, None, ["loss = " + "a + " * 40 + "b\n"], filename)
    described = describe(Frame("train", filename, 1))
    assert described.startswith("train.py, line 1: loss = a + a") and described.endswith("…")
    assert describe(Frame("train", "/nowhere/gone.py", 3)) == "gone.py, line 3"


def test_an_ipykernel_6_cell_file_is_named_by_its_prompt_number_from_the_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """IPython 7.34 under ipykernel 6 (Colab) names cells by temporary files and keeps no map to their numbers."""
    filename = "/tmp/ipykernel_9/4127435255.py"
    cell = "%%tpu_train\nfor step in range(3):\n    value = loss.item()\n"
    linecache.cache[filename] = (len(cell), None, cell.splitlines(keepends=True), filename)
    history = SimpleNamespace(input_hist_raw=["", "import torch\n", cell], input_hist_parsed=["", "import torch\n", "get_ipython()..."])
    monkeypatch.setattr(places, "_shell", lambda: SimpleNamespace(compile=SimpleNamespace(), history_manager=history))
    assert describe(Frame("<module>", filename, 3)) == "In [2], line 3: value = loss.item()"
