"""What a caller can ask of a launch, checked before anything starts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tpu_nb.basics.units import UnitError, parse_duration
from tpu_nb.kernel.endings.notebook_errors import refused
from tpu_nb.kernel.planning.checkpoint_plans import plan_checkpoints
from tpu_nb.kernel.planning.deadlines import Deadline, deadline_for
from tpu_nb.kernel.planning.declared_options import OPTION_NAMED, OPTIONS
from tpu_nb.runtime import Accelerator, Platform, RuntimeInfo
from tpu_nb.runtime.info import STACK_NAMES, StackName
from tpu_nb.wire.checkpoints import CheckpointPlan
from tpu_nb.wire.mesh import MeshError, MeshShape
from tpu_nb.wire.stacks import WatchdogSetting
from tpu_nb.workers.processes.chip_ranks import EXECUTION_MODES, ExecutionMode

RUN_OPTION_NAMES = frozenset(option.name for option in OPTIONS if option.part == "run")
NO_COMPILE_CACHE = "off"
WATCHDOG_OFF = "off"

# Where Colab's and Kaggle's TPU runtimes keep files between kernel restarts
# (Kaggle also saves /kaggle/working with the notebook's output).
_DEFAULT_CACHE_DIRS = {Platform.COLAB: "/content/tpu_nb_xla_cache", Platform.KAGGLE: "/kaggle/working/tpu_nb_xla_cache"}


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchOptions:
    """Options shared by `%%tpu_train`, `tpu_nb.launch` and `tpu_nb.pod.launch`; `from_user` reads them as typed."""

    cores: int | None = None
    """Use this many XLA devices instead of all of them."""
    timeout: float | None = None
    """Stop every worker after this many seconds (like an interrupt)."""
    all_ranks_output: bool = False
    """Show what every rank prints, prefixed with its rank (default: rank 0 only)."""
    progress: bool = True
    """Show the live progress display."""
    all_results: bool = False
    """Return every rank's result (a list by rank) instead of rank 0's."""
    stop_grace: float = OPTION_NAMED["stop_grace"].default
    """After a graceful stop request, the least time to wait for the workers to reach a step boundary (longer steps are learned)."""
    spmd: bool = False
    """One worker process drives every device, and the compiler shards the program (SPMD)."""
    mesh: MeshShape | None = None
    """With `spmd`: the device mesh (default: every device on the "fsdp" axis)."""
    doctor: bool = True
    """The XLA doctor: why compilations happened and where, host syncs, CPU fallbacks, input waits, where a step's time goes."""
    flops_per_token: float | None = None
    """--flops-per-token: the model's training FLOPs per token, for MFU (None: a Trainer's model's own estimate)."""
    compile_cache: str | None = None
    """XLA's persistent compilation cache directory ("off": none; default: a working directory on Colab/Kaggle TPUs)."""
    checkpoints: CheckpointPlan | None = None
    """--checkpoint: where the run's checkpoints go, how often, how many, and what it resumes from."""
    deadline: Deadline | None = None
    """--deadline: when the run must have stopped (it stops earlier, with a checkpoint); on Kaggle's TPU, the session's end."""
    watchdog: WatchdogSetting | None = field(default_factory=WatchdogSetting)
    """--watchdog: after how long a rank that does not move gets every rank's stack shown (None: off)."""
    stack: StackName | None = None
    """--stack: torch_xla or torch_tpu (None: the one that works with the installed torch)."""
    mode: ExecutionMode | None = None
    """--mode, on TorchTPU: eager, fused or compile (None: fused for a hand-written loop, eager for a Trainer)."""
    run_log: str | None = None
    """--run-log: the run log's directory, or "off" (None: TPU_NB_RUN_LOG, else tpu_nb_runs in the working directory)."""

    @classmethod
    def from_user(cls, **given: Any) -> LaunchOptions:
        """The run's options as the user gave them (`declared_options`: names, defaults, what each means).

        `LaunchRefused` when one cannot be read: the mesh as text ("fsdp=4,tensor=2"), `resume` True (or "") for
        `checkpoint`'s directory or a directory, `deadline` "8h30m" from now or "21:00", `budget` "15GB", `watchdog`
        seconds ("90", "2m"), "off", or None to learn it.
        """
        unknown = set(given) - RUN_OPTION_NAMES
        if unknown:
            raise TypeError(f"LaunchOptions.from_user() got options that are not a run's: {sorted(unknown)}")
        value = {option.name: given.get(option.name, option.default) for option in OPTIONS if option.part == "run"}
        try:
            mesh_shape = None if value["mesh"] is None else MeshShape.parse(value["mesh"])
        except MeshError as error:
            raise refused(str(error)) from None
        checkpoints = plan_checkpoints(value["checkpoint"], value["every"], value["keep"], value["resume"], value["budget"])
        deadline_at = None if value["deadline"] is None else deadline_for(value["deadline"], None)
        return cls(
            cores=value["cores"],
            timeout=value["timeout"],
            all_ranks_output=value["all_ranks_output"],
            progress=value["progress"],
            all_results=value["all_results"],
            stop_grace=value["stop_grace"],
            spmd=value["spmd"],
            mesh=mesh_shape,
            doctor=value["doctor"],
            flops_per_token=value["flops_per_token"],
            compile_cache=value["compile_cache"],
            checkpoints=checkpoints,
            deadline=deadline_at,
            watchdog=_watchdog_setting(value["watchdog"]),
            stack=_stack_named(value["stack"]),
            mode=_mode_named(value["mode"]),
            run_log=value["run_log"],
        )

    def deadline_on(self, info: RuntimeInfo) -> Deadline | None:
        """The run's deadline here: the user's, or the hosted session's end (Kaggle's TPU)."""
        return self.deadline if self.deadline is not None else deadline_for(None, info)

    def problems(self) -> list[str]:
        """What is wrong with these options, each with the fix."""
        found = []
        if self.cores is not None and self.cores < 1:
            found.append(f"cores={self.cores}: give a positive number of XLA devices, or leave it out to use all.")
        if self.timeout is not None and not self.timeout > 0:
            found.append(f"timeout={self.timeout}: give a positive number of seconds, or leave it out for no limit.")
        if not self.stop_grace > 0:
            found.append(f"stop_grace={self.stop_grace}: give a positive number of seconds.")
        if self.mesh is not None and not self.spmd:
            found.append(f"mesh={self.mesh}: a mesh is for SPMD runs; add --spmd (spmd=True), or leave the mesh out.")
        if self.spmd and self.all_results:
            found.append("all_results=True: an SPMD run has one worker, so there is one result; leave all_results out.")
        if self.flops_per_token is not None and not self.flops_per_token > 0:
            found.append(f"flops_per_token={self.flops_per_token}: give the model's FLOPs per token, a positive number.")
        if self.compile_cache is not None and not self.compile_cache.strip():
            found.append(f'compile_cache="": give a directory for the compilation cache, or "{NO_COMPILE_CACHE}" for none.')
        return found

    def compile_cache_for(self, info: RuntimeInfo) -> str | None:
        """The compilation cache directory the workers use on this runtime, if any."""
        if self.compile_cache == NO_COMPILE_CACHE:
            return None
        if self.compile_cache is not None:
            return self.compile_cache
        return _DEFAULT_CACHE_DIRS.get(info.platform) if info.accelerator is Accelerator.TPU else None

    def mesh_for(self, devices: int) -> MeshShape:
        """The mesh of an SPMD run over `devices` devices."""
        return self.mesh if self.mesh is not None else MeshShape.default(devices)


def _stack_named(value: str | None) -> StackName | None:
    """`--stack`'s value: None (or "auto") for the stack that works here."""
    if value in (None, "auto"):
        return None
    for name in STACK_NAMES:
        if value == name:
            return name
    raise refused(f"stack={value!r}: give torch_xla or torch_tpu, or leave it out (auto).")


def _mode_named(value: str | None) -> ExecutionMode | None:
    """`--mode`'s value: None for the default (fused for a loop, eager for a Trainer)."""
    if value is None:
        return None
    for mode in EXECUTION_MODES:
        if value == mode:
            return mode
    raise refused(f"mode={value!r}: TorchTPU's modes are {', '.join(EXECUTION_MODES)}.")


def _watchdog_setting(value: str | float | None) -> WatchdogSetting | None:
    """`--watchdog`'s value: None learns the threshold from the run, "off" turns the watchdog off."""
    if value is None:
        return WatchdogSetting()
    if isinstance(value, str) and value.strip().lower() == WATCHDOG_OFF:
        return None
    try:
        return WatchdogSetting(parse_duration(str(value), "--watchdog"))
    except UnitError as error:
        raise refused(f'{error} Or --watchdog off (watchdog="off") to turn it off.') from None
