"""Checks made in the kernel before anything is forked."""

from __future__ import annotations

from tpu_nb.kernel.endings.notebook_errors import refused
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.planning.worker_environment import TRAINER_ON_ONE_CHIP, CoresUnavailable, plan_environment
from tpu_nb.runtime import RuntimeInfo
from tpu_nb.wire.environment import WorkerEnvironment
from tpu_nb.workers.processes.chip_ranks import TOPOLOGIES

SHARED = (
    "TPU cores cannot be shared between runs. Wait for it, or stop it first: interrupt its cell, or call .stop() or .kill() "
    "on a background run's handle."
)


def check_can_launch(info: RuntimeInfo, options: LaunchOptions, running: str | None, trainer: bool = False) -> WorkerEnvironment:
    """The workers' environment, or `LaunchRefused` listing every problem with its fix (`trainer`: the code uses a Trainer)."""
    problems = []
    if running is not None:
        problems.append(f"{running} is still running in this kernel: {SHARED}")
    problems += [f"{problem.message}\n  Fix: {problem.fix}" for problem in info.errors]
    problems += options.problems()
    problems += _stack_problems(info, options, trainer)
    environment = None
    try:
        environment = plan_environment(info, options.cores, spmd=options.spmd, trainer=trainer)
    except CoresUnavailable as error:
        problems.append(str(error))
    if environment is not None and options.spmd and options.mesh_for(environment.devices).devices != environment.devices:
        mesh = options.mesh_for(environment.devices)
        problems.append(
            f"--mesh {mesh} covers {mesh.devices} devices, but this run has {environment.devices}: choose axis sizes that "
            f"multiply to {environment.devices}" + (f", or --cores {mesh.devices} (XLA:CPU)." if info.pjrt_device == "CPU" else ".")
        )
    if problems or environment is None:
        raise refused(problems)
    return environment


def _stack_problems(info: RuntimeInfo, options: LaunchOptions, trainer: bool) -> list[str]:
    """Options that the chosen TPU stack does not take, each with the fix."""
    if info.stack.chosen == "torch_xla":
        if options.mode is not None:
            return [f"--mode {options.mode} is for TorchTPU runs: torch_xla always traces and compiles the step; leave --mode out."]
        return []
    problems = []
    if options.spmd:
        problems.append(
            "--spmd on TorchTPU (FSDP2: the model sharded over the chips) is not in tpu_nb yet: leave --spmd out (each chip "
            "trains a replica, gradients averaged), or use torch_xla's --spmd."
        )
    if trainer and (options.cores or 1) > 1:
        problems.append(f"--cores {options.cores}: {TRAINER_ON_ONE_CHIP} Leave --cores out, or write the loop (DDP) to use every chip.")
    if info.tpu is not None:
        chips = options.cores or info.devices
        counts = TOPOLOGIES.get(info.tpu.generation)
        if counts is None:
            problems.append(f"TorchTPU does not run on TPU {info.tpu.generation} (it knows {', '.join(TOPOLOGIES)}): use torch_xla there.")
        elif chips != 1 and chips not in counts:
            asked = f"--cores {chips}" if options.cores else f"This host's {chips} chips"
            problems.append(
                f"{asked}: TorchTPU runs {', '.join(map(str, counts))} processes on a TPU {info.tpu.generation} host "
                "(one per chip); choose one of those with --cores."
            )
    return problems
