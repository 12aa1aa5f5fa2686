"""A rank's stack folded to the line of its cell and the library call it waits in."""

from __future__ import annotations

import linecache
from collections.abc import Iterator

import pytest

from tpu_nb.kernel.stalls.folding import fold_process, library_frame_text, place_of
from tpu_nb.workers.doctor.analysis_log import Frame
from tpu_nb.workers.stack_dumps import ProcessStacks, ThreadStack

CELL = "<ipython-input-5-0123456789ab>"  # how IPython 7 names cell 5's code
SITE = "/usr/lib/python3/dist-packages"
TPU_NB = str(__import__("tpu_nb").__path__[0])


@pytest.fixture(autouse=True)
def cell_source() -> Iterator[None]:
    source = "import torch\nfor step in range(10):\n    loss = model(batch)\n    xm.optimizer_step(optimizer)\n"
    linecache.cache[CELL] = (len(source), None, source.splitlines(keepends=True), CELL)
    yield
    linecache.cache.pop(CELL, None)


def frames() -> tuple[Frame, ...]:
    return (
        Frame("run_worker", f"{TPU_NB}/workers/worker.py", 60),
        Frame("<module>", CELL, 4),
        Frame("optimizer_step", f"{SITE}/torch_xla/core/xla_model.py", 1250),
        Frame("all_reduce", f"{SITE}/torch_xla/core/xla_model.py", 512),
    )


def test_the_cell_line_and_the_innermost_library_call_are_named_and_tpu_nb_frames_left_out() -> None:
    place = place_of(2, 4321, 17, frames())
    assert (place.rank, place.pid, place.step) == (2, 4321, 17)
    assert place.where == "In [5], line 4: xm.optimizer_step(optimizer)"
    assert place.waits_in == "torch_xla/core/xla_model.py, line 512, in all_reduce"
    assert place.stack == (
        "In [5], line 4: xm.optimizer_step(optimizer)",
        "torch_xla/core/xla_model.py, line 1250, in optimizer_step",
        "torch_xla/core/xla_model.py, line 512, in all_reduce",
    )


def test_a_rank_stopped_on_its_own_line_waits_in_nothing_else() -> None:
    place = place_of(0, 1, None, frames()[:2])
    assert place.where == "In [5], line 4: xm.optimizer_step(optimizer)" and place.waits_in is None


def test_a_process_s_threads_are_told_apart_by_rank_and_its_own_helpers_hidden() -> None:
    heartbeat = ThreadStack(7, (Frame("_beat", f"{TPU_NB}/workers/reporting.py", 120), Frame("sleep", f"{SITE}/x.py", 1)))
    loader = ThreadStack(8, (Frame("_pin_memory_loop", f"{SITE}/torch/utils/data/_utils/pin_memory.py", 50),))
    rank_threads = (ThreadStack(5, frames()), ThreadStack(6, frames()[:2]))
    places = fold_process(ProcessStacks(99, (*rank_threads, heartbeat, loader)), {5: 0, 6: 1}, {0: 3, 1: 4})
    assert [(place.rank, place.step) for place in places] == [(0, 3), (1, 4)]
    assert places[0].other_threads == ("thread 0x8: torch/utils/data/_utils/pin_memory.py, line 50, in _pin_memory_loop",)


def test_standard_library_files_are_named_without_their_installation() -> None:
    assert library_frame_text(Frame("wait", "/usr/lib/python3.13/threading.py", 359)) == "threading.py, line 359, in wait"
