"""tqdm's bars in a worker are text on its stderr, whichever class drew them, even one made in the notebook before the fork."""

from __future__ import annotations

import time
from typing import Any

import pytest
import tqdm.notebook
from support.platforms import MakeSystem
from support.torch_tpu_stand_in import install
from tqdm.asyncio import tqdm_asyncio

import tpu_nb


class LibraryBar(tqdm.notebook.tqdm):  # type: ignore[misc]
    """What `datasets`, huggingface_hub and TRL do: subclass the class tqdm.auto had when they were imported (in a kernel,
    tqdm.notebook's, and in the notebook, before the fork)."""


class AutoBar(tqdm.notebook.tqdm, tqdm_asyncio):  # type: ignore[misc]
    """tqdm.auto's class in a kernel."""


def widgets_made(ipywidgets: Any) -> int:
    """How many widgets live: ipywidgets 8 keeps them in `widget._instances`, 7 (Colab's) in `Widget.widgets`."""
    live = getattr(ipywidgets.widgets.widget, "_instances", None)
    return len(ipywidgets.Widget.widgets if live is None else live)


def draw_bars() -> tuple[int, int]:
    """In the worker: a bar of each class, a slow one besides. The widgets made, and the lines the slow bar drew."""
    import ipywidgets

    widgets_before = widgets_made(ipywidgets)
    for bar_class in (tqdm.notebook.tqdm, LibraryBar, AutoBar):
        for _ in bar_class(range(1000), desc=bar_class.__name__):
            pass
    for _ in tqdm.notebook.tqdm(range(1000), desc="undisplayed", display=False):  # the widget's own keyword
        pass
    slow = tqdm.notebook.tqdm(total=300, desc="slow")
    for _ in range(300):
        time.sleep(0.002)
        slow.update()
    slow.close()
    return widgets_made(ipywidgets) - widgets_before, slow.n


def assert_text_bars(err: str, out: str) -> None:
    for name in ("tqdm_notebook", "LibraryBar", "AutoBar", "undisplayed", "slow"):
        total = 300 if name == "slow" else 1000
        assert f"{name}: 100%|██████████| {total}/{total}" in err, err
    assert "tqdm_notebook" not in out  # no widget's text form printed on stdout
    # tqdm redraws at most every 0.1 s: 300 updates over about a second draw a handful of lines, not one each.
    slow_lines = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("slow:")]
    assert 2 <= len(slow_lines) <= 40, slow_lines


def test_notebook_bars_made_before_the_fork_draw_text_in_an_xla_worker(capsys: pytest.CaptureFixture[str]) -> None:
    widgets, drawn = tpu_nb.launch(draw_bars, progress=False, timeout=120)
    assert (widgets, drawn) == (0, 300)
    captured = capsys.readouterr()
    assert_text_bars(captured.err, captured.out)
    assert "display" in vars(tqdm.notebook.tqdm)  # the notebook's own class still draws widgets


def test_the_same_in_a_torch_tpu_rank(monkeypatch: pytest.MonkeyPatch, make_system: MakeSystem, capsys: pytest.CaptureFixture[str]) -> None:
    install(monkeypatch, make_system)
    widgets, drawn = tpu_nb.launch(draw_bars, progress=False, cores=1, timeout=120)
    assert (widgets, drawn) == (0, 300)
    captured = capsys.readouterr()
    assert_text_bars(captured.err, captured.out)
