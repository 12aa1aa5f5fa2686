"""A rank's stack folded to the line of its cell and the library call it waits in."""

from __future__ import annotations

import linecache
from collections.abc import Iterator

import pytest

from tpu_nb.kernel.stalls.folding import fold_process, library_frame_text, place_of
from tpu_nb.workers.doctor.analysis_log import Frame
from tpu_nb.workers.stalls.stack_dumps import ProcessStacks, ThreadStack

CELL = "<ipython-input-5-0123456789ab>"  # how IPython 7 names cell 5's code
HELPERS = "<ipython-input-4-0123456789ab>"
SITE = "/usr/lib/python3/dist-packages"
TPU_NB = str(__import__("tpu_nb").__path__[0])


@pytest.fixture(autouse=True)
def cell_source() -> Iterator[None]:
    source = "import torch\nfor step in range(10):\n    loss = model(batch)\n    xm.optimizer_step(optimizer)\n"
    linecache.cache[CELL] = (len(source), None, source.splitlines(keepends=True), CELL)
    helpers = "import time\ndef sleeping():\n    time.sleep(3600)\ndef twice():\n    sleeping()\n"
    linecache.cache[HELPERS] = (len(helpers), None, helpers.splitlines(keepends=True), HELPERS)
    yield
    linecache.cache.pop(CELL, None)
    linecache.cache.pop(HELPERS, None)


def frames() -> tuple[Frame, ...]:
    return (
        Frame("run_worker", f"{TPU_NB}/workers/processes/worker.py", 60),
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
    heartbeat = ThreadStack(7, (Frame("_beat", f"{TPU_NB}/workers/cell_api/reporting.py", 120), Frame("sleep", f"{SITE}/x.py", 1)))
    loader = ThreadStack(8, (Frame("_pin_memory_loop", f"{SITE}/torch/utils/data/_utils/pin_memory.py", 50),))
    rank_threads = (ThreadStack(5, frames()), ThreadStack(6, frames()[:2]))
    places = fold_process(ProcessStacks(99, (*rank_threads, heartbeat, loader)), {5: 0, 6: 1}, {0: 3, 1: 4})
    assert [(place.rank, place.step) for place in places] == [(0, 3), (1, 4)]
    assert places[0].other_threads == ("thread 0x8: torch/utils/data/_utils/pin_memory.py, line 50, in _pin_memory_loop",)


def test_standard_library_files_are_named_without_their_installation() -> None:
    assert library_frame_text(Frame("wait", "/usr/lib/python3.13/threading.py", 359)) == "threading.py, line 359, in wait"


def in_a_function(*calls: Frame) -> tuple[Frame, ...]:
    """A rank's thread in cell 5's code at line 3 (`loss = model(batch)` stands for the call), then in `calls`."""
    return (Frame("run_worker", f"{TPU_NB}/workers/processes/worker.py", 60), Frame("<module>", CELL, 3), *calls)


def test_a_rank_in_a_function_of_its_cell_names_the_chain_of_cell_lines_as_a_traceback_would() -> None:
    place = place_of(0, 1, 2, in_a_function(Frame("sleeping", CELL, 2)))
    assert place.where == "In [5], line 3: loss = model(batch); line 2, in sleeping: for step in range(10):"
    assert place.waits_in is None  # time.sleep is C code: no library frame
    assert place.stack == ("In [5], line 3: loss = model(batch)", "In [5], line 2, in sleeping: for step in range(10):")


def test_functions_of_another_cell_are_named_with_their_cell_and_the_library_call_it_waits_in() -> None:
    library = Frame("wait", "/usr/lib/python3.11/threading.py", 320)
    place = place_of(0, 1, 2, in_a_function(Frame("twice", HELPERS, 5), Frame("sleeping", HELPERS, 3), library))
    assert place.where == (
        "In [5], line 3: loss = model(batch); In [4], line 5, in twice: sleeping(); line 3, in sleeping: time.sleep(3600)"
    )
    assert place.waits_in == "threading.py, line 320, in wait"


def test_a_deep_chain_keeps_the_cell_s_line_and_the_innermost_calls() -> None:
    recursion = [Frame("twice", HELPERS, 5) for _ in range(6)]
    place = place_of(0, 1, 2, in_a_function(*recursion, Frame("sleeping", HELPERS, 3)))
    assert place.where == (
        "In [5], line 3: loss = model(batch); … 4 more; In [4], line 5, in twice: sleeping(); line 5, in twice: sleeping(); "
        "line 3, in sleeping: time.sleep(3600)"
    )


def test_a_forked_process_s_frames_from_before_the_fork_are_no_part_of_its_chain() -> None:
    """A process per device (forked while the kernel ran the cell's `%%tpu_train` line) keeps that line's frame."""
    before_the_fork = (Frame("<module>", CELL, 1), Frame("run_cell_magic", f"{SITE}/IPython/core/interactiveshell.py", 2500))
    place = place_of(0, 1, 2, (*before_the_fork, *in_a_function(Frame("sleeping", CELL, 2))))
    assert place.where == "In [5], line 3: loss = model(batch); line 2, in sleeping: for step in range(10):"
