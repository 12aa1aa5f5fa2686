"""Which input changed shape, from batches or `.to(device)` calls, and how sure a measured rate is."""

from __future__ import annotations

import linecache
from types import SimpleNamespace
from typing import Any

from tpu_nb.workers.doctor.analysis_log import Frame
from tpu_nb.workers.doctor.input_shapes import VaryingInput, varying_input
from tpu_nb.workers.doctor.span import Span
from tpu_nb.workers.doctor.transfers import TransferWatch

CELL = "/tmp/ipykernel_1/moves.py"
linecache.cache[CELL] = (0, None, ["x = batch.to(device)\n"], CELL)
MOVE_LINE = Frame("<module>", CELL, 1)


def test_the_input_seen_in_the_most_shapes_is_the_varying_one() -> None:
    batches = (((16, 128), (16,)), ((16, 96), (16,)))
    assert varying_input(batches, ()) == VaryingInput(((16, 128), (16, 96)), None)
    moved = ((MOVE_LINE, ((16, 128), (16, 96))),)
    assert varying_input(batches, moved) == VaryingInput(((16, 128), (16, 96)), MOVE_LINE)  # a tie: the line wins
    assert varying_input((((16, 128), (16,)),), ((MOVE_LINE, ((16, 128),)),)) is None  # one shape each
    assert varying_input((), ()) is None


def test_the_dimensions_that_change_are_the_batch_or_the_length() -> None:
    assert VaryingInput(((16, 128), (16, 96)), None).dimensions == {"length"}
    assert VaryingInput(((16, 128), (5, 128)), None).dimensions == {"batch"}
    assert VaryingInput(((16, 128), (5, 96), (5, 128, 2)), None).dimensions == {"batch", "length"}


def test_many_shapes_are_named_in_part() -> None:
    shapes = tuple((size, 64) for size in range(8, 18))
    assert VaryingInput(shapes, None).named == "(8, 64), (9, 64), (10, 64), (11, 64), (12, 64), (13, 64) and 4 more"


def test_a_span_says_how_rough_its_figure_is() -> None:
    assert Span(5, 60, 1.84, includes_warmup=False).text == "measured over 55 steps (6–60) in 1.8 s"
    assert Span(5, 15, 1.0, includes_warmup=False).text.endswith(": few steps, so the figure is rough")
    assert Span(0, 60, 0.7, includes_warmup=True).text == (
        "measured over 60 steps (1–60) in 0.7 s, warm-up included: a short run, so the figure is rough"
    )


class FakeTensor:
    """Just what the watch looks at: a device type and a shape."""

    def __init__(self, device: str, shape: tuple[int, ...]) -> None:
        self.device = SimpleNamespace(type=device)
        self.shape = shape


def fake_to(tensor: FakeTensor, device: str, **_options: Any) -> FakeTensor:
    return FakeTensor(device, tensor.shape)


def test_moves_from_the_users_code_to_the_device_are_recorded_by_call() -> None:
    watch = TransferWatch()
    to = watch._watched(fake_to)
    # Line 1 of the cell moves a batch of `size` rows to the device; line 2 moves it again (already there),
    # line 3 keeps one on the host: only line 1 is a move to the device.
    cell = compile("x = to(FakeTensor('cpu', (size, 64)), 'xla')\ny = to(x, 'xla')\nz = to(FakeTensor('cpu', (3,)), 'cpu')\n", CELL, "exec")
    for size in (8, 9, 8):
        exec(cell, {"to": to, "FakeTensor": FakeTensor, "size": size})
    assert watch.sites() == ((MOVE_LINE, ((8, 64), (9, 64))),)


def test_moves_made_by_libraries_are_not_recorded() -> None:
    watch = TransferWatch()
    to = watch._watched(fake_to)
    library = "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py"
    exec(compile("to(FakeTensor('cpu', (64, 64)), 'xla')\n", library, "exec"), {"to": to, "FakeTensor": FakeTensor})
    assert watch.sites() == ()
