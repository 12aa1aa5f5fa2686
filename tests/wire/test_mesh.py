"""--mesh as users write it."""

from __future__ import annotations

import pytest

from tpu_nb.wire.mesh import MeshError, MeshShape


def test_a_mesh_is_read_in_the_order_written() -> None:
    mesh = MeshShape.parse("fsdp=4, tensor=2")
    assert (mesh.axes, mesh.sizes, mesh.devices, str(mesh)) == (("fsdp", "tensor"), (4, 2), 8, "fsdp=4,tensor=2")


def test_the_default_puts_every_device_on_fsdp() -> None:
    assert MeshShape.default(4) == MeshShape(("fsdp", "tensor"), (4, 1))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("fsdp:4", "write axes as name=size"),
        ("", "write axes as name=size"),
        ("fsdp=4,fsdp=2", "each axis may appear once"),
        ("fsdp=0", "a size of at least 1"),
        ("data=4", "name one axis fsdp"),
    ],
)
def test_a_mesh_that_cannot_be_read_says_how_to_write_it(text: str, problem: str) -> None:
    with pytest.raises(MeshError, match=problem):
        MeshShape.parse(text)
