"""Planning the workers' environment for this runtime and a `--cores` request.

The supervisor applies the plan to its own copy after the fork
(`tpu_nb.wire.environment`); the kernel's `os.environ` is never changed.
"""

from __future__ import annotations

import os

from tpu_nb.runtime import Accelerator, RuntimeInfo
from tpu_nb.wire.environment import WorkerEnvironment

# Chips -> TPU_PROCESS_BOUNDS for using part of a host (one process per chip).
# Not testable here (no TPU): follows torch_xla's _internal/tpu.py.
_TPU_PROCESS_BOUNDS = {1: "1,1,1", 2: "1,2,1", 4: "2,2,1"}


TRAINER_ON_ONE_CHIP = (
    "a Hugging Face Trainer on TorchTPU trains on one chip: accelerate (which the Trainer runs on) has no TorchTPU "
    "distributed mode, so on several chips each process would train alone, unaware of the others."
)


class CoresUnavailable(ValueError):
    """`--cores` asks for a device count this runtime cannot give."""


def plan_environment(
    info: RuntimeInfo, cores: int | None, environ: dict[str, str] | None = None, spmd: bool = False, trainer: bool = False
) -> WorkerEnvironment:
    """Decide the workers' environment for this runtime, `cores` request and mode (SPMD or one process per chip).

    `trainer`: the code uses a Hugging Face Trainer (on TorchTPU it gets one chip).
    """
    environ = dict(os.environ) if environ is None else environ
    settings = {} if info.stack.chosen == "torch_tpu" else {"PJRT_DEVICE": info.pjrt_device}  # torch_xla's variable
    notes = []
    # tokenizers turns its parallelism off with a warning in every forked
    # child once the notebook has used it; say so once, quietly, instead.
    if "TOKENIZERS_PARALLELISM" not in environ:
        settings["TOKENIZERS_PARALLELISM"] = "false"
    if info.topology_vars:
        notes.append(
            f"tpu_nb: removed {', '.join(info.topology_vars)} for the workers (preset by this platform, they break multi-process start)."
        )
    # XLA's C++ logs a warning (GSPMD's deprecation in favour of Shardy) for
    # every graph an SPMD program compiles; errors still show. torch_xla sets
    # level 1 itself when imported, so only 0 (more logging) is a user's choice.
    if spmd and environ.get("TF_CPP_MIN_LOG_LEVEL", "1") == "1":
        settings["TF_CPP_MIN_LOG_LEVEL"] = "2"
    devices = info.devices
    if info.stack.chosen == "torch_tpu":  # a process per chip, each told its chip by tpu_nb (`tpu_nb.workers.processes.chip_ranks`)
        if cores is not None and cores > info.devices:
            raise CoresUnavailable(f"--cores {cores}: this host has {info.devices} TPU chips. Use at most {info.devices}.")
        if trainer and cores is None and devices > 1:
            notes.append(f"tpu_nb: {TRAINER_ON_ONE_CHIP}")
            devices = 1
        return WorkerEnvironment(set=settings, remove=tuple(info.topology_vars), notes=tuple(notes), devices=cores or devices)
    if cores is not None and cores != info.devices:
        if spmd and info.pjrt_device != "CPU":
            raise CoresUnavailable(f"--cores {cores}: an SPMD run drives every TPU core of the host; leave --cores out.")
        settings.update(_cores_settings(info, cores))
        devices = cores
    return WorkerEnvironment(set=settings, remove=tuple(info.topology_vars), notes=tuple(notes), devices=devices)


def _cores_settings(info: RuntimeInfo, cores: int) -> dict[str, str]:
    if info.pjrt_device == "CPU":
        return {"CPU_NUM_DEVICES": str(cores)}
    if info.accelerator is not Accelerator.TPU or info.tpu is None:
        raise CoresUnavailable(f"--cores {cores}: PJRT device {info.pjrt_device} is not supported by tpu_nb's --cores.")
    if cores > info.devices:
        raise CoresUnavailable(
            f"--cores {cores}: this {info.tpu.generation} host has {info.devices} TPU cores. Use at most {info.devices}."
        )
    per_chip = info.tpu.devices_per_chip
    chips, rest = divmod(cores, per_chip)
    if rest or chips not in _TPU_PROCESS_BOUNDS:
        allowed = sorted({n * per_chip for n in _TPU_PROCESS_BOUNDS if n * per_chip <= info.devices} | {info.devices})
        raise CoresUnavailable(
            f"--cores {cores}: a {info.tpu.generation} host can be split into {', '.join(map(str, allowed))} cores ({per_chip} per chip)."
        )
    # torch_xla starts min(chips, process bounds) processes and gives each
    # its own chip (TPU_VISIBLE_CHIPS = local rank), so bounds are enough.
    return {"TPU_PROCESS_BOUNDS": _TPU_PROCESS_BOUNDS[chips], "TPU_CHIPS_PER_PROCESS_BOUNDS": "1,1,1"}
