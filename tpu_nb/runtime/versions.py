"""Version policy: which torch / torch_xla / libtpu go together, and what to install where.

The one place that reads version strings: a local build tag (`2.9.0+cpu` on
Colab, `+cu121` on PyPI's CUDA builds) names the same release as `2.9.0`.
"""

from __future__ import annotations

from tpu_nb.runtime.info import TpuInfo, Versions

PINNED_TORCH_XLA = "2.9.0"
"""The newest torch_xla on PyPI, built against the torch of the same version; tpu_nb's `xla` extra pins this pair off-TPU."""

LIBTPU_FOR_TORCH_XLA: dict[tuple[str, ...], str] = {("2", "8"): "0.0.17", ("2", "9"): "0.0.21"}
"""The libtpu each torch_xla line was built for (its `tpu` extra pins it). Kaggle pins 0.0.17 for torch_xla 2.8
because newer ones fail with a PJRT API mismatch; Colab ships 0.0.21.1 with torch_xla 2.9."""


def release(version: str) -> str:
    """The public release without a local build tag: 2.5.1+cu121 -> 2.5.1."""
    return version.split("+", 1)[0]


def same_release(found: str | None, wanted: str | None) -> bool:
    """Equal but for a local build tag: torch 2.9.0+cpu (Colab) runs the same code as 2.9.0 (PyPI, TPU VMs)."""
    return found is not None and wanted is not None and release(found) == release(wanted)


def major_minor(version: str) -> tuple[str, ...]:
    return tuple(release(version).split(".")[:2])


def has_matching_xla(versions: Versions) -> bool:
    """torch and torch_xla of the same release line (torch_xla only works with the torch it was built against)."""
    return bool(versions.torch and versions.torch_xla and major_minor(versions.torch) == major_minor(versions.torch_xla))


def expected_libtpu(torch_xla: str) -> str | None:
    """The libtpu the torch_xla line was built for, where tpu_nb knows it."""
    return LIBTPU_FOR_TORCH_XLA.get(major_minor(torch_xla))


def libtpu_matches(libtpu: str, expected: str) -> bool:
    return release(libtpu).split(".")[:3] == expected.split(".")  # 0.0.21.1 is a 0.0.21


def xla_install(tpu: TpuInfo | None, versions: Versions) -> str:
    """The pip command that gives this runtime a torch_xla matching its torch."""
    if tpu is None:
        # XLA:CPU: tpu_nb's `xla` extra pins the pair that works off-TPU.
        return "pip install 'tpu_nb[xla]'"
    if versions.torch:
        # A TPU image's torch is kept (its other packages were built against
        # it); torch_xla releases only match torch's major.minor.
        line = ".".join(major_minor(versions.torch))
        return f"pip install 'torch_xla[tpu]~={line}.0'"
    return f"pip install torch=={PINNED_TORCH_XLA} 'torch_xla[tpu]=={PINNED_TORCH_XLA}'"


def install_command(tpu: TpuInfo | None, versions: Versions) -> str:
    """How to install tpu_nb here, installing nothing the runtime already has that works."""
    if has_matching_xla(versions):
        return "pip install tpu_nb"  # Colab, Kaggle, Cloud TPU images: tpu_nb alone
    if tpu is None:
        return xla_install(tpu, versions)
    return f"{xla_install(tpu, versions)} tpu_nb"
