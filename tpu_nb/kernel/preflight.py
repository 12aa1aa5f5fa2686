"""Checks made in the kernel before anything is forked."""

from __future__ import annotations

from tpu_nb.runtime import RuntimeInfo
from tpu_nb.wire.environment import WorkerEnvironment

from .environment import CoresUnavailable, plan_environment
from .errors import LaunchRefused
from .options import LaunchOptions


def check_can_launch(info: RuntimeInfo, options: LaunchOptions, running: str | None) -> WorkerEnvironment:
    """The workers' environment, or `LaunchRefused` listing every problem with its fix."""
    problems = []
    if running is not None:
        problems.append(
            f"{running} is still running in this kernel: TPU cores cannot be shared between runs. "
            "Wait for it, or stop it first: interrupt its cell, or call .stop() or .kill() on a background run's handle."
        )
    problems += [f"{problem.message}\n  Fix: {problem.fix}" for problem in info.errors]
    problems += options.problems()
    environment = None
    try:
        environment = plan_environment(info, options.cores, spmd=options.spmd)
    except CoresUnavailable as error:
        problems.append(str(error))
    if environment is not None and options.spmd and options.mesh_for(environment.devices).devices != environment.devices:
        mesh = options.mesh_for(environment.devices)
        problems.append(
            f"--mesh {mesh} covers {mesh.devices} devices, but this run has {environment.devices}: choose axis sizes that "
            f"multiply to {environment.devices}" + (f", or --cores {mesh.devices} (XLA:CPU)." if info.pjrt_device == "CPU" else ".")
        )
    if problems or environment is None:
        raise LaunchRefused("tpu_nb did not start the workers:\n" + "\n".join(f"- {problem}" for problem in problems))
    return environment
