"""The device mesh of an `--spmd` run: chosen in the kernel, built by the SPMD worker."""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_AXES = ("fsdp", "tensor")
_AXIS = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\d+)")


class MeshError(ValueError):
    """A `--mesh` that cannot be read."""


@dataclass(frozen=True, slots=True)
class MeshShape:
    """Axis names and sizes, e.g. (("fsdp", "tensor"), (4, 2)): 8 devices, parameters sharded 4 ways."""

    axes: tuple[str, ...]
    sizes: tuple[int, ...]

    @classmethod
    def default(cls, devices: int) -> MeshShape:
        """Every device on the fsdp axis: FSDPv2, parameters sharded across all of them."""
        return cls(DEFAULT_AXES, (devices, 1))

    @classmethod
    def parse(cls, text: str) -> MeshShape:
        """ "fsdp=4,tensor=2" -> MeshShape(("fsdp", "tensor"), (4, 2))."""
        parts = [part.strip() for part in text.split(",") if part.strip()]
        matches = [_AXIS.fullmatch(part) for part in parts]
        if not parts or not all(matches):
            raise MeshError(f"--mesh {text}: write axes as name=size separated by commas, e.g. fsdp=4,tensor=2.")
        axes = tuple(match.group(1) for match in matches if match)
        sizes = tuple(int(match.group(2)) for match in matches if match)
        if len(set(axes)) != len(axes):
            raise MeshError(f"--mesh {text}: each axis may appear once.")
        if min(sizes) < 1:
            raise MeshError(f"--mesh {text}: every axis needs a size of at least 1.")
        if "fsdp" not in axes:
            raise MeshError(f"--mesh {text}: name one axis fsdp (parameters and batches are sharded along it).")
        return cls(axes, sizes)

    @property
    def devices(self) -> int:
        count = 1
        for size in self.sizes:
            count *= size
        return count

    def __str__(self) -> str:
        return ",".join(f"{axis}={size}" for axis, size in zip(self.axes, self.sizes, strict=True))
