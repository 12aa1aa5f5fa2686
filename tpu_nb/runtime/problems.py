"""What stops or degrades `%%tpu_train` on a runtime: one rule per problem, each giving its fix.

Each rule looks at what detection found (`Detected`) and returns a `Problem`
or None; `RULES` is their order in `%tpu_info`. A new problem is a new rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tpu_nb.runtime.device_holders import DeviceHolder, Origin
from tpu_nb.runtime.info import Problem, StackChoice, TpuInfo, Versions
from tpu_nb.runtime.system import SystemView, torch_tpu_backend_loaded, torch_tpu_runtime_started, xla_runtime_started
from tpu_nb.runtime.versions import expected_libtpu, has_matching_xla, libtpu_matches, release

TORCH_XLA_MISSING = "torch_xla_missing"
VERSION_MISMATCH = "version_mismatch"
RUNTIME_INITIALIZED = "runtime_initialized"
TOPOLOGY_VARS = "topology_vars"
TPU_BUSY = "tpu_busy"
LIBTPU_MISSING = "libtpu_missing"
LIBTPU_MISMATCH = "libtpu_mismatch"
PJRT_CPU_ON_TPU = "pjrt_cpu_on_tpu"
NO_TPU = "no_tpu"
TORCH_TPU_INCOMPLETE = "torch_tpu_incomplete"
TORCH_TPU_NEEDS_TPU = "torch_tpu_needs_tpu"
TORCH_TPU_IN_KERNEL = "torch_tpu_in_kernel"


@dataclass(frozen=True, slots=True)
class Detected:
    """What detection found, for the rules to judge."""

    system: SystemView
    tpu: TpuInfo | None
    gpu_count: int
    versions: Versions
    pjrt_device: str
    workers: int
    topology_vars: tuple[str, ...]
    xla_install: str
    tpu_holders: tuple[DeviceHolder, ...]
    stack: StackChoice

    @property
    def on_torch_xla(self) -> bool:
        return self.stack.chosen == "torch_xla"


def runtime_initialized(found: Detected) -> Problem | None:
    if not xla_runtime_started(found.system.modules):
        return None
    return Problem(
        RUNTIME_INITIALIZED,
        "error",
        "An XLA device was already used in this process, so %%tpu_train can no longer start "
        "its workers (torch_xla refuses with 'Runtime is already initialized').",
        "Restart the runtime (kernel), then keep all XLA device use inside %%tpu_train cells: "
        "in the notebook itself, do not create TrainingArguments or a Trainer, and do not call "
        "xm.xla_device() or torch_xla.device().",
    )


def tpu_busy(found: Detected) -> Problem | None:
    holders = found.tpu_holders
    if not found.tpu or not holders:
        return None
    return Problem(
        TPU_BUSY,
        "error",
        "The TPU is held by another process: " + "; ".join(holder.summary for holder in holders) + ".",
        " ".join(_how_to_free(holders, found.system.own_uid)),
    )


def _how_to_free(holders: tuple[DeviceHolder, ...], own_uid: int) -> list[str]:
    """One sentence per kind of holder: what `%tpu_release` ends, and what only its user, root or a restart can."""
    elsewhere = [holder for holder in holders if holder.origin is Origin.ELSEWHERE and holder.uid in (own_uid, None)]
    stale = [holder.pid for holder in elsewhere if holder.stale]
    live = [holder for holder in elsewhere if not holder.stale]
    others = [holder for holder in holders if holder.origin is Origin.ELSEWHERE and holder.uid not in (own_uid, None)]
    started_here = [holder.pid for holder in holders if holder.origin is Origin.THIS_KERNEL]
    above = [holder.pid for holder in holders if holder.origin is Origin.KERNEL_ANCESTOR]
    sentences = []
    if stale:
        sentences.append(f"Run %tpu_release to end {_pids(stale)} (or: kill {_numbers(stale)}), or restart the runtime.")
    for holder in live:
        sentences.append(f"pid {holder.pid} is live ({holder.belongs_to}): if it should stop, %tpu_release {holder.pid} ends it.")
    for holder in others:
        sentences.append(f"pid {holder.pid} belongs to {holder.owner}: only they or root can end it (sudo kill {holder.pid}).")
    if started_here:
        sentences.append(
            f"This kernel started {_pids(started_here)}: interrupt the cell running it, call .stop() or .kill() on a "
            f"background run's handle, or kill {_numbers(started_here)}."
        )
    if above:
        sentences.append(f"This kernel runs under {_pids(above)}: restart the runtime.")
    return sentences


def _pids(pids: list[int]) -> str:
    return ("pid " if len(pids) == 1 else "pids ") + _numbers(pids)


def _numbers(pids: list[int]) -> str:
    return " ".join(map(str, pids))


def torch_xla_missing(found: Detected) -> Problem | None:
    if found.versions.torch_xla or not found.on_torch_xla:
        return None
    return Problem(
        TORCH_XLA_MISSING,
        "error",
        "torch_xla is not installed; %%tpu_train needs it to run on XLA devices.",
        found.xla_install,
    )


def version_mismatch(found: Detected) -> Problem | None:
    versions = found.versions
    if not versions.torch or not versions.torch_xla or has_matching_xla(versions) or not found.on_torch_xla:
        return None
    return Problem(
        VERSION_MISMATCH,
        "error",
        f"torch {versions.torch} does not match torch_xla {versions.torch_xla}: "
        "torch_xla only works with the torch release it was built against.",
        found.xla_install,
    )


def libtpu_missing(found: Detected) -> Problem | None:
    versions = found.versions
    if not found.tpu or not versions.torch_xla or versions.libtpu or not found.on_torch_xla:
        return None
    return Problem(
        LIBTPU_MISSING,
        "error",
        "libtpu is not installed, so torch_xla cannot reach the TPU.",
        # The `tpu` extra of the installed torch_xla brings the libtpu it was built for.
        f"pip install 'torch_xla[tpu]=={release(versions.torch_xla)}'",
    )


def libtpu_mismatch(found: Detected) -> Problem | None:
    versions = found.versions
    if not found.tpu or not versions.torch_xla or not versions.libtpu or not found.on_torch_xla:
        return None
    expected = expected_libtpu(versions.torch_xla)
    if expected is None or libtpu_matches(versions.libtpu, expected):
        return None
    return Problem(
        LIBTPU_MISMATCH,
        "warning",
        f"libtpu {versions.libtpu} is not the libtpu {expected} that torch_xla {versions.torch_xla} was built for: "
        "the TPU may fail to start with a PJRT API mismatch.",
        f"pip install libtpu=={expected}",
    )


def pjrt_cpu_on_tpu(found: Detected) -> Problem | None:
    tpu = found.tpu
    if not tpu or found.pjrt_device.upper() == "TPU" or not found.on_torch_xla:
        return None
    return Problem(
        PJRT_CPU_ON_TPU,
        "warning",
        f"PJRT_DEVICE is set to {found.pjrt_device} although a TPU {tpu.generation} is attached: "
        f"%%tpu_train would run on {found.pjrt_device} and leave the TPU unused.",
        "Set PJRT_DEVICE=TPU (%env PJRT_DEVICE=TPU) or remove it from the environment.",
    )


def topology_vars(found: Detected) -> Problem | None:
    if not found.topology_vars:
        return None
    expected = found.workers if found.workers > 1 else "N"
    return Problem(
        TOPOLOGY_VARS,
        "warning",
        f"This environment presets {' and '.join(found.topology_vars)}, which break a multi-process "
        f'start ("Expected {expected} worker addresses, got 1"). tpu_nb removes them for its workers.',
        "No action needed.",
    )


def no_tpu(found: Detected) -> Problem | None:
    if found.tpu or not found.on_torch_xla:
        return None
    gpus = f" ({found.gpu_count} NVIDIA GPU(s) found; tpu_nb does not use GPUs)" if found.gpu_count else ""
    return Problem(
        NO_TPU,
        "info",
        f"No TPU attached{gpus}: %%tpu_train runs on one XLA:CPU worker, useful for trying code but slow for real training.",
        "To train on a TPU, switch the notebook to a TPU runtime (Colab: Runtime > Change runtime type; Kaggle: Settings > Accelerator).",
    )


def torch_tpu_incomplete(found: Detected) -> Problem | None:
    used = found.stack.used
    if found.on_torch_xla or used.works:
        return None
    return Problem(TORCH_TPU_INCOMPLETE, "error", f"TorchTPU (torch_tpu) cannot run here: {used.missing}.", used.fix or "")


def torch_tpu_needs_tpu(found: Detected) -> Problem | None:
    if found.on_torch_xla or found.tpu:
        return None
    return Problem(
        TORCH_TPU_NEEDS_TPU,
        "error",
        "No TPU attached, and TorchTPU (torch_tpu) has no CPU mode: %%tpu_train on TorchTPU needs a TPU.",
        "Switch the notebook to a TPU runtime, or try your cells on XLA:CPU in an environment with torch_xla "
        "(pip install 'tpu_nb[xla]': torch and torch_xla 2.9).",
    )


def torch_tpu_in_kernel(found: Detected) -> Problem | None:
    modules = found.system.modules
    if found.on_torch_xla or not torch_tpu_backend_loaded(modules):
        return None
    if torch_tpu_runtime_started(modules):
        return Problem(
            TORCH_TPU_IN_KERNEL,
            "error",
            "A TPU was already used in this notebook's own process through torch_tpu, so the workers %%tpu_train forks "
            "from it are refused (torch_tpu: 'cannot access or re-initialize TPU in a forked subprocess').",
            "Restart the runtime (kernel), then keep all TPU use inside %%tpu_train cells: in the notebook itself, do not "
            "move tensors or models to 'tpu'.",
        )
    return Problem(
        TORCH_TPU_IN_KERNEL,
        "warning",
        "torch_tpu is loaded in this notebook's own process (import torch loads it when a TPU is attached, unless "
        "TORCH_DEVICE_BACKEND_AUTOLOAD=0): each worker %%tpu_train forks inherits it with libtpu's threads. tpu_nb still "
        "gives each worker its chip and mode, but a fork of a process with those threads may hang.",
        "Restart the runtime (kernel) and run %load_ext tpu_nb before importing torch (it sets TORCH_DEVICE_BACKEND_AUTOLOAD=0).",
    )


RULES: tuple[Callable[[Detected], Problem | None], ...] = (
    runtime_initialized,
    torch_tpu_in_kernel,
    torch_tpu_incomplete,
    torch_tpu_needs_tpu,
    tpu_busy,
    torch_xla_missing,
    version_mismatch,
    libtpu_missing,
    libtpu_mismatch,
    pjrt_cpu_on_tpu,
    topology_vars,
    no_tpu,
)


def problems_of(found: Detected) -> tuple[Problem, ...]:
    """Every rule's problem, in `RULES` order."""
    return tuple(problem for rule in RULES if (problem := rule(found)) is not None)
