"""A run on this machine: checks, the forked supervisor and its workers, their events, their ending.

`Run` is the only owner of a run's state; its life (stops, kills, the
timeout) is `FollowedRun`'s. One run at a time per kernel: TPU devices
cannot be shared between two sets of workers. A sweep's trials are runs
too, each in a world of its own chips (`planning.worlds`): the sweep holds
the kernel's one slot for all of them.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from tpu_nb.kernel.endings.notebook_errors import refused
from tpu_nb.kernel.endings.run_ending import Died, Ending, Outcome, Stopped, collect, ending_of
from tpu_nb.kernel.notebook.cell_output import OutputPrinter, Write, write_to_sys
from tpu_nb.kernel.planning.options import LaunchOptions
from tpu_nb.kernel.planning.preflight import SHARED, check_can_launch
from tpu_nb.kernel.planning.worlds import World
from tpu_nb.kernel.progress.display import make_display
from tpu_nb.kernel.progress.throughput import host_basis
from tpu_nb.kernel.run import warm_imports
from tpu_nb.kernel.run.followed_run import FollowedRun, RunObserver
from tpu_nb.kernel.run.processes import TERMINATE_GRACE, WorkerProcesses
from tpu_nb.kernel.stalls.watch import StallWatch
from tpu_nb.kernel.tpu.chip_usage import ChipUsagePoller, metrics_addresses, rank_chip_text, tpu_info_installed, usage_for_rank, usage_text
from tpu_nb.runtime import RuntimeInfo, detect
from tpu_nb.wire.events import ChipFigures, Event, Notice, Stalled, Stopping, WorkerRaised, WorkerStarted
from tpu_nb.wire.shared_memory_stop import StopRequest
from tpu_nb.wire.stacks import StackReport
from tpu_nb.wire.stop_reason import StopReason
from tpu_nb.workers.processes import chip_ranks
from tpu_nb.workers.processes.chip_ranks import ChipRun
from tpu_nb.workers.processes.programs import Program, uses_trainer


class _EventFacts:
    """What the kernel learns about the workers from their events."""

    def __init__(self) -> None:
        self.ranks_by_pid: dict[int, int] = {}
        self.world_size: int | None = None
        self.first_raising_rank: int | None = None
        self.last_step: int | None = None  # rank 0's
        self.stopping_step: int | None = None  # where rank 0 stopped gracefully
        self.stopping_reason: StopReason | None = None  # and the reason it obeyed

    def on_event(self, event: Event) -> None:
        if isinstance(event, WorkerStarted):
            self.ranks_by_pid[event.pid] = event.rank
            self.world_size = event.world_size
        elif isinstance(event, WorkerRaised) and self.first_raising_rank is None:
            self.first_raising_rank = event.rank
        elif isinstance(event, Stopping) and event.rank == 0:
            self.stopping_step, self.stopping_reason = event.step, event.reason
        step = getattr(event, "step", None)
        if step is not None and getattr(event, "rank", None) == 0:
            self.last_step = step


def _chip_poller(info: RuntimeInfo, devices: int, spmd: bool) -> tuple[ChipUsagePoller, int] | None:
    """On a TPU where tpu-info is installed: the chips' figures, read from each worker process's libtpu (started after the fork)."""
    if info.tpu is None or not tpu_info_installed():
        return None
    per_process = devices if spmd else info.tpu.devices_per_chip  # torch_xla: a process per chip; SPMD: one for all
    poller = ChipUsagePoller(metrics_addresses(max(devices // per_process, 1)), devices_per_chip=info.tpu.devices_per_chip)
    return poller.start(), per_process


class Holder(Protocol):
    """What holds the kernel's one run slot: a run, or a sweep for its trials."""

    @property
    def title(self) -> str: ...


class Run(FollowedRun):
    """One launch on this machine, from its checks to its ending."""

    _alive: ClassVar[Holder | None] = None

    def __init__(
        self,
        program: Program,
        options: LaunchOptions,
        title: str,
        observers: Sequence[RunObserver] = (),
        write: Write = write_to_sys,
        world: World | None = None,
        logged: Mapping[str, Any] | None = None,
        returned: Callable[[], Collection[str]] | None = None,
    ) -> None:
        super().__init__(options, title, observers, write, logged)
        self.program = program
        self.world = world
        """A trial's world (its chips, and the variables that bind it to them); None: every device of the host."""
        self._returned = returned  # which --return names to load when the results come back (None: all)
        self._processes = WorkerProcesses()
        self._facts = _EventFacts()
        self._stop_request: StopRequest | None = None
        self._stalls: StallWatch | None = None
        self._chips: tuple[ChipUsagePoller, int] | None = None  # on a TPU with tpu-info: the poller, and devices per process
        self._chips_shown = 0  # the poller's generation last put on the worker rows
        self._mode_reason = ""  # why a TorchTPU run has its execution mode, for the dashboard

    @classmethod
    def alive(cls) -> str | None:
        """The title of the run (or sweep) alive in this kernel, if any."""
        return None if cls._alive is None else cls._alive.title

    @classmethod
    def hold(cls, holder: Holder) -> None:
        """`holder` (a sweep) takes the kernel's one run slot for the runs it starts; `LaunchRefused` if a run has it."""
        running = cls.alive()
        if running is not None:
            raise refused(f"{running} is still running in this kernel: {SHARED}")
        cls._alive = holder

    @classmethod
    def let_go(cls, holder: Holder) -> None:
        """`holder` gives the slot back."""
        if cls._alive is holder:
            cls._alive = None

    def _start(self) -> None:
        info = detect(stack=self.options.stack)
        trainer = info.stack.chosen == "torch_tpu" and uses_trainer(self.program)
        in_sweep = self.world is not None  # the sweep holds the slot
        environment = check_can_launch(info, self.options, running=None if in_sweep else Run.alive(), trainer=trainer)
        if self.world is not None:
            environment = self.world.environment(environment)
        chips = self._chip_run(info, environment.devices, trainer)
        for note in environment.notes:
            self._write("stderr", note + "\n")
        self._deadline = self.options.deadline_on(info)
        self._speed.basis = host_basis(info, environment.devices, self.options.flops_per_token)
        if self.options.progress:
            workers = 1 if self.options.spmd else environment.devices  # SPMD: one worker drives them all
            label = info.label if chips is None else f"{info.label} · {chips.mode} ({self._mode_reason})"
            self._display = make_display(self.title, label, workers, basis=self._speed.basis)
        shown_after: list[RunObserver] = [self._display] if self._display is not None else []
        self._observers = [OutputPrinter(self.options.all_ranks_output, self._write), self._facts, *self._observers, *shown_after]
        self._stop_request = StopRequest(environment.devices)
        if not in_sweep:
            Run._alive = self
        try:
            mesh = self.options.mesh_for(environment.devices) if self.options.spmd else None
            self._processes.start(
                self.program,
                environment,
                self._stop_request,
                self.options.all_results,
                mesh,
                doctor=self.options.doctor,
                compile_cache=self._compile_cache(info),
                checkpoints=self.options.checkpoints,
                watchdog=self.options.watchdog,
                chips=chips,
            )
        except BaseException:
            Run.let_go(self)
            raise
        finally:
            if chips is not None:
                chips.release()  # the supervisor forked with its copy of the rendezvous's socket, or never will
        assert self._processes.places is not None
        try:
            self._chips = _chip_poller(info, environment.devices, self.options.spmd)
            self._stalls = StallWatch(self._processes.places.exchange_dir, self.options.watchdog, chips=self._chip_text)
        except BaseException:
            self._processes.end()  # started, but not yet a run that close() would end: nothing may be left running
            Run.let_go(self)
            raise
        self._observers.insert(0, self._stalls)

    def _compile_cache(self, info: RuntimeInfo) -> str | None:
        """Each world compiles into a directory of its own: two processes writing one cache could corrupt it."""
        directory = self.options.compile_cache_for(info)
        if directory is None or self.world is None:
            return directory
        return f"{directory.rstrip('/')}/world-{self.world.index}"

    def _chip_run(self, info: RuntimeInfo, chips: int, trainer: bool) -> ChipRun | None:
        """A TorchTPU run's plan: a process per chip, in the mode asked for or the default for its code."""
        if info.stack.chosen != "torch_tpu":
            return None
        mode = self.options.mode
        if mode is not None:
            self._mode_reason = "--mode"
        else:
            mode, self._mode_reason = ("eager", "a Trainer's default") if trainer else ("fused", "a loop's default")
        assert info.tpu is not None  # checked: TorchTPU has no CPU mode
        host_chips = None if self.world is None else self.world.chips
        return ChipRun.plan(chip_ranks.TORCH_TPU, info.tpu.generation, chips, mode, host_chips)

    def _chip_text(self, rank: int) -> str | None:
        if self._chips is None:
            return None
        poller, devices_per_process = self._chips
        return rank_chip_text(poller.readings() or (), rank, devices_per_process)

    def stacks(self) -> StackReport:
        """Where every rank is now, with a verdict (any thread; takes up to a few seconds)."""
        if self._stalls is None:
            raise RuntimeError(f"{self.title} has not started its workers yet")
        return self._stalls.report("asked for")

    def _take_events(self, timeout: float) -> None:
        assert self._stalls is not None
        for event in self._processes.read(timeout):
            self._deliver(event)
            report = self._stalls.on_stall(event) if isinstance(event, Stalled) else None
            if report is not None:
                self._deliver(report)
        silence = self._stalls.silent_process()
        if silence is not None:
            self._deliver(silence)
        self._deliver_chip_figures()

    def _deliver_chip_figures(self) -> None:
        """Each rank's chip figures on its worker row, when the poller has read new ones."""
        if self._chips is None or self._chips[0].generation == self._chips_shown:
            return
        poller, per_process = self._chips
        self._chips_shown = poller.generation
        readings = poller.readings()
        for rank in sorted(self._facts.ranks_by_pid.values()):
            usage = usage_for_rank(readings or (), rank, per_process)
            if usage is not None:
                self._deliver(ChipFigures(rank, usage if isinstance(usage, str) else usage_text(usage)))

    def _ended_by_itself(self) -> bool:
        if self._processes.exit_status is None:
            return False
        self._deliver_rest()
        if self._processes.group_alive:
            self._processes.end()  # processes a worker started and left behind
        return True

    def _worker_failed(self) -> bool:
        return self._facts.first_raising_rank is not None

    def _stop_reached(self) -> bool:
        return self._facts.stopping_step is not None

    def _ask_to_stop(self) -> None:
        if self._stop_request is not None:
            self._stop_request.request(self._stopped_by)

    def _end_everything(self) -> None:
        killed = self._processes.end(workers=list(self._facts.ranks_by_pid))
        self._deliver_rest()
        ranks = [f"rank {self._facts.ranks_by_pid[pid]} (pid {pid})" for pid in killed if pid in self._facts.ranks_by_pid]
        if ranks:
            text = f"{', '.join(ranks)} did not end on SIGTERM within {TERMINATE_GRACE:g}s: ended with SIGKILL"
            self._write("stderr", f"tpu_nb: {text}.\n")
            self._deliver(Notice(0, text))

    def _ending(self) -> Ending:
        return ending_of(self._outcome())

    def _release(self) -> None:
        if self._chips is not None:
            self._chips[0].stop()
        if self._processes.places is not None:
            warm_imports.warm_up_after(self._processes.places.exchange_dir)  # for the next run's start
        self._processes.close()
        Run.let_go(self)

    def _outcome(self) -> Outcome:
        seconds = self._seconds
        if self._hard_stop is not None:
            return Stopped(self._hard_stop, seconds, self._facts.last_step)
        facts = self._facts
        ranks = list(range(facts.world_size or 1)) if self.options.all_results else [0]
        # None only if the supervisor could not be reaped even after SIGKILL
        # (stuck in uninterruptible I/O on a device): say it was killed.
        exit_status = self._processes.exit_status
        exit_status = -signal.SIGKILL if exit_status is None else exit_status
        assert self._processes.places is not None
        outcome = collect(
            self._processes.places.exchange_dir,
            facts.ranks_by_pid,
            facts.first_raising_rank,
            exit_status,
            ranks,
            seconds,
            facts.stopping_step,
            facts.stopping_reason or self._stopped_by,  # the reason the workers obeyed (the same, the first stop winning)
            self._returned,
        )
        if isinstance(outcome, Died):
            self._processes.keep = outcome.kept
        return outcome

    def _deliver_rest(self) -> None:
        for event in self._processes.read_rest():
            self._deliver(event)
