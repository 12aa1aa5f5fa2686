"""Cloud TPU slice names ("v5litepod-16", "v4-32") and the shape each one stands for."""

from __future__ import annotations

import re
from dataclasses import dataclass


class SliceError(ValueError):
    """A TPU slice or pod run that cannot be set up as asked; the message says what to change."""


_POD_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


def check_pod_name(name: str) -> str:
    """`name` if it can name a TPU VM and the run directories made from it (Cloud TPU's rule: a DNS-1035 label)."""
    if not _POD_NAME.fullmatch(name):
        raise SliceError(
            f"--pod {name!r}: a TPU VM's name is 1 to 63 lower-case letters, digits and '-', starting with a letter and "
            "ending with a letter or digit, e.g. 'my-slice'."
        )
    return name


@dataclass(frozen=True, slots=True)
class TpuSlice:
    """One TPU slice: how many chips, on how many hosts, and how GKE labels its nodes."""

    accelerator_type: str
    """As Cloud TPU names it, e.g. "v5litepod-16"."""
    generation: str
    """"v4", "v5e", "v5p" or "v6e"."""
    chips: int
    hosts: int
    chips_per_host: int
    gke_accelerator: str
    """The node label `cloud.google.com/gke-tpu-accelerator`, e.g. "tpu-v5-lite-podslice"."""
    gke_topology: str
    """The node label `cloud.google.com/gke-tpu-topology`, e.g. "4x4" or "2x2x4"."""

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1


@dataclass(frozen=True, slots=True)
class _Family:
    generation: str
    cloud_prefix: str
    """The prefix of Cloud TPU's own name (the "v5e" alias becomes "v5litepod")."""
    cores_per_chip: int
    """The N of a name counts TensorCores, which is chips for v5e/v6e but two per chip for v4/v5p."""
    max_single_host_chips: int
    """v5e/v6e slices of up to 8 chips are one VM; every larger slice has 4 chips per VM."""
    gke_accelerator: str
    topologies: dict[int, str]
    """Chips → topology: the default shape Google Cloud documents for each slice size."""


_CUBES = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8", 512: "8x8x8"}
_SQUARES = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}

_V5E = _Family("v5e", "v5litepod", 1, 8, "tpu-v5-lite-podslice", _SQUARES)
_FAMILIES = {
    "v4": _Family("v4", "v4", 2, 4, "tpu-v4-podslice", _CUBES),
    "v5p": _Family("v5p", "v5p", 2, 4, "tpu-v5p-slice", _CUBES),
    "v5litepod": _V5E,
    "v5e": _V5E,
    "v6e": _Family("v6e", "v6e", 1, 8, "tpu-v6e-slice", _SQUARES),
}


def _names(family: _Family) -> str:
    return ", ".join(f"{family.cloud_prefix}-{chips * family.cores_per_chip}" for chips in family.topologies)


def parse_slice(accelerator_type: str) -> TpuSlice:
    """The slice a Cloud TPU accelerator type names ("v5litepod-16", "v5e-8", "v4-32", "v5p-128", "v6e-256")."""
    match = re.fullmatch(r"([a-z0-9]+)-([0-9]+)", accelerator_type.strip().lower())
    family = _FAMILIES.get(match[1]) if match else None
    if match is None or family is None:
        raise SliceError(
            f"{accelerator_type!r} is not a TPU slice tpu_nb knows: give a Cloud TPU accelerator type, "
            "v4-N or v5p-N (N TensorCores, 2 per chip) or v5litepod-N, v5e-N or v6e-N (N chips), "
            "e.g. v5litepod-16, v4-32, v5p-128 or v6e-256."
        )
    cores = int(match[2])
    chips, remainder = divmod(cores, family.cores_per_chip)
    topology = family.topologies.get(chips) if remainder == 0 else None
    if topology is None:
        raise SliceError(f"{accelerator_type!r} is not a {family.generation} slice size: use one of {_names(family)}.")
    chips_per_host = chips if chips <= family.max_single_host_chips else 4
    return TpuSlice(
        accelerator_type=f"{family.cloud_prefix}-{cores}",
        generation=family.generation,
        chips=chips,
        hosts=chips // chips_per_host,
        chips_per_host=chips_per_host,
        gke_accelerator=family.gke_accelerator,
        gke_topology=topology,
    )
