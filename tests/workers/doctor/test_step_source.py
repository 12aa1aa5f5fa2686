"""The lines of a step whose sizes change, read from the source around the line that compiled."""

from __future__ import annotations

import linecache
from collections.abc import Iterator

import pytest

from tpu_nb.workers.doctor.analysis_log import Frame
from tpu_nb.workers.doctor.step_source import suspects

CELL = "/tmp/ipykernel_7/step-source-cell.py"
SOURCE = """%%tpu_train
rows = 16
def step_of(x, length):
    y = x[:, :length]
    return layer(y).mean()
for step in range(1, 41):
    x = torch.randn(4 + step, 8, device=device)
    fixed = torch.zeros(rows, 8, device=device)
    host = torch.randn(4 + step, 8)
    keep = (x[:, 0] > 0).nonzero().squeeze(1)
    positive = x[x > 0]
    loss = step_of(x[keep], step % 8)
    torch_xla.sync()
"""


@pytest.fixture(autouse=True)
def cell() -> Iterator[None]:
    linecache.cache[CELL] = (len(SOURCE), None, SOURCE.splitlines(keepends=True), CELL)
    yield
    linecache.cache.pop(CELL, None)


def test_the_loop_around_the_compiling_line_names_sizes_made_from_its_values() -> None:
    found = suspects(Frame("<module>", CELL, 13))
    assert [(suspect.frame.line, suspect.kind) for suspect in found] == [(7, "made"), (10, "data-dependent"), (11, "data-dependent")]
    assert all(suspect.frame.filename == CELL for suspect in found)


def test_sizes_fixed_outside_the_loop_and_tensors_made_on_the_host_are_not_suspects() -> None:
    lines = {suspect.frame.line for suspect in suspects(Frame("<module>", CELL, 13))}
    assert 8 not in lines and 9 not in lines


def test_in_a_function_outside_any_loop_its_parameters_are_what_changes() -> None:
    [suspect] = suspects(Frame("step_of", CELL, 5))
    assert (suspect.frame.line, suspect.kind) == (4, "sliced")


def test_code_without_a_source_or_a_loop_names_nothing() -> None:
    assert suspects(Frame("<module>", "/no/such/cell.py", 3)) == ()
    assert suspects(Frame("<module>", CELL, 2)) == ()
