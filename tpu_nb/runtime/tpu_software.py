"""The TPU stacks PyTorch can run on here, and which one `%%tpu_train` uses: torch_xla, or TorchTPU (torch_tpu).

PyTorch/XLA (torch_xla, last release 2.9) is built against one torch release;
TorchTPU (torch_tpu, its successor) needs torch 2.11 to 2.15 and libtpu. So
one environment can hold both, but at most one of them works with its torch.
Pure logic on installed versions: nothing here imports either stack.
"""

from __future__ import annotations

from tpu_nb.runtime.info import StackChoice, StackName, StackStatus, Versions
from tpu_nb.runtime.versions import has_matching_xla, major_minor, release

TORCH_FOR_TORCH_TPU = ((2, 11), (2, 15))
"""The torch releases torch-tpu 0.2.0 accepts (its `Requires-Dist: torch>=2.11.0,<=2.15.0`)."""


def stack_statuses(versions: Versions) -> tuple[StackStatus, StackStatus]:
    """torch_xla's and torch_tpu's status, from the installed versions."""
    return _torch_xla_status(versions), _torch_tpu_status(versions)


def choose_stack(versions: Versions, asked: StackName | None = None) -> StackChoice:
    """The stack `%%tpu_train` uses: the one asked for (`--stack`), else the one that works with this torch."""
    stacks = stack_statuses(versions)
    xla, tpu = stacks
    if asked is not None:
        return StackChoice(asked, "asked for with --stack", stacks)
    if xla.works and tpu.works:
        return StackChoice("torch_xla", "both work here; torch_xla is the default (--stack torch_tpu picks TorchTPU)", stacks)
    if tpu.works:
        return StackChoice("torch_tpu", f"TorchTPU is the stack that works with torch {versions.torch}", stacks)
    if xla.works:
        return StackChoice("torch_xla", f"torch_xla is the stack that works with torch {versions.torch}", stacks)
    if tpu.version is not None and xla.version is None:
        return StackChoice("torch_tpu", "torch_tpu is the only TPU stack installed", stacks)
    return StackChoice("torch_xla", "no TPU stack works here yet; torch_xla is the default", stacks)


def _torch_xla_status(versions: Versions) -> StackStatus:
    if versions.torch_xla is None:
        return StackStatus("torch_xla", None, "not installed", "pip install 'tpu_nb[xla]' (off-TPU), or torch_xla[tpu] for this torch")
    if not has_matching_xla(versions):
        line = ".".join(major_minor(versions.torch_xla))
        found = f"torch {versions.torch} is installed" if versions.torch else "torch is not installed"
        return StackStatus("torch_xla", versions.torch_xla, f"it needs torch {line}, and {found}", f"pip install 'torch~={line}.0'")
    return StackStatus("torch_xla", versions.torch_xla, None)


def _torch_tpu_status(versions: Versions) -> StackStatus:
    (low_major, low_minor), (high_major, high_minor) = TORCH_FOR_TORCH_TPU
    torch_range = f"torch {low_major}.{low_minor} to {high_major}.{high_minor}"
    in_its_own = (
        f"pip install 'torch>={low_major}.{low_minor},<={high_major}.{high_minor}.0' torch-tpu 'libtpu>=0.0.50', in an environment "
        "of its own (a TPU image's other packages were built against its torch)"
    )
    if versions.torch_tpu is None:
        return StackStatus("torch_tpu", None, f"not installed (it needs {torch_range})", in_its_own)
    torch = versions.torch
    if torch is None or not _torch_fits_torch_tpu(torch):
        found = f"torch {torch} is installed" if torch else "torch is not installed"
        return StackStatus("torch_tpu", versions.torch_tpu, f"it needs {torch_range}, and {found}", in_its_own)
    if versions.libtpu is None:
        return StackStatus("torch_tpu", versions.torch_tpu, "libtpu is not installed", "pip install 'libtpu>=0.0.50'")
    return StackStatus("torch_tpu", versions.torch_tpu, None)


def _torch_fits_torch_tpu(torch: str) -> bool:
    parts = release(torch).split(".")[:2]
    if not all(part.isdecimal() for part in parts) or len(parts) < 2:
        return False
    line = (int(parts[0]), int(parts[1]))
    low, high = TORCH_FOR_TORCH_TPU
    return low <= line <= high
