"""Messages workers send to the kernel while a run is alive.

Forked workers cannot draw in the notebook (ipykernel drops messages sent
from a fork), so they send these small records and the kernel draws. Each
one must pickle to well under 4 KiB: see `tpu_nb.wire.channel`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tpu_nb.wire.stacks import StackReport
from tpu_nb.wire.stop_reason import StopReason


@dataclass(frozen=True, slots=True)
class WorkerStarted:
    """A worker reached the user's code (the XLA runtime is up in it)."""

    rank: int
    world_size: int
    pid: int
    device: str
    thread: int = 0  # the rank's thread (threading.get_ident()), which names it in its process's stack dumps


@dataclass(frozen=True, slots=True)
class Output:
    """Text a worker (rank) or the supervisor (rank None) printed."""

    rank: int | None
    stream: str  # "stdout" or "stderr"
    text: str


@dataclass(frozen=True, slots=True)
class WorkerFinished:
    """The user's code returned on this rank; its result file is written."""

    rank: int


@dataclass(frozen=True, slots=True)
class WorkerRaised:
    """The user's code raised on this rank; details are in its error file."""

    rank: int
    summary: str


@dataclass(frozen=True, slots=True)
class Counted:
    """What the ranks fed their model up to a reported step, counted by rank 0 (times the ranks): tokens/s, samples/s, MFU."""

    seconds: float  # the worker's monotonic clock when the step was reported
    tokens: int | None  # tokens that are not padding, so far (None: not counted)
    samples: int | None
    flops_per_token: float | None = None  # the model's, where the worker knows it (a Trainer's model)


@dataclass(frozen=True, slots=True)
class Progress:
    """Training metrics from rank 0 (`report(...)` or a Trainer's logs)."""

    rank: int
    step: int | None
    metrics: dict[str, float] = field(default_factory=dict)
    max_steps: int | None = None
    epoch: float | None = None
    phase: str | None = None
    counted: Counted | None = None  # tokens and samples so far, where the run counts them


@dataclass(frozen=True, slots=True)
class TimeSpent:
    """Where a rank's training thread spent its time since it started (cumulative seconds), as the doctor read it."""

    seconds: float  # the worker's monotonic clock at the reading
    steps: int  # steps reported by then
    input_wait: float  # waiting for its next batch
    host: float  # busy on the host outside those waits (running or waiting for a core: tracing, Python); the rest it waited for the device


@dataclass(frozen=True, slots=True)
class CompileCause:
    """Why the XLA doctor thinks a graph was compiled, where in the user's code, and the fix."""

    reason: str  # e.g. "input shape changed (batch 13 vs 16)"
    place: str | None  # e.g. "In [4], line 7: loss = step(batch)"
    fix: str


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Low-rate liveness from every rank, with its XLA compilation health."""

    rank: int
    step: int | None
    phase: str
    compile_count: int
    compile_seconds: float
    causes: tuple[CompileCause, ...] = ()  # of the compilations since the last heartbeat (at most a few)
    memory: tuple[int, int] | None = None  # device memory (bytes used, bytes limit), where the device reports it
    cache: tuple[int, int] | None = None  # persistent compilation cache (hits, misses), when one is on
    compiling: float | None = None  # seconds an XLA compilation has been running in this rank's process, if one is
    # Training steps at whose boundary this rank found new compilations, since its last heartbeat: (first, last) runs.
    compiled_steps: tuple[tuple[int, int], ...] = ()
    spent: TimeSpent | None = None  # where its training thread's time went, where the XLA doctor measures it


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Something slowing a rank down that the XLA doctor found: the evidence, where, the fix.

    Sent again as the evidence grows; a later one with the same `key` replaces it.
    """

    rank: int
    key: str
    title: str  # e.g. "Host syncs"
    evidence: str
    places: tuple[str, ...]
    fix: str
    step: int | None


@dataclass(frozen=True, slots=True)
class Stopping:
    """This rank reached the agreed stop step after a graceful stop request, asked for `reason`."""

    rank: int
    step: int
    reason: StopReason


@dataclass(frozen=True, slots=True)
class CheckpointSaved:
    """A checkpoint was written and checked, or failed its check (with the reason; the previous good one is kept)."""

    rank: int
    step: int
    path: str
    seconds: float  # from the step's end to written and checked
    stall_seconds: float  # how long the training step waited for it (the copy to host memory)
    size: int  # bytes
    verified: bool
    problem: str | None
    removed: int  # older checkpoints removed once this one was verified


@dataclass(frozen=True, slots=True)
class History:
    """Metrics logged before this run started (a resumed run's curve so far), oldest first."""

    rank: int
    rows: tuple[tuple[int | None, dict[str, float]], ...]


@dataclass(frozen=True, slots=True)
class Stalled:
    """The watchdog: this rank has not moved for longer than its threshold (said once per stall)."""

    rank: int
    step: int | None
    seconds: float  # since it last moved
    threshold: float
    compiling: float | None  # seconds an XLA compilation has been running in its process, if one is


@dataclass(frozen=True, slots=True)
class ChipFigures:
    """What a rank's TPU chip is doing, from libtpu's runtime metrics (made in the kernel, where tpu-info reads them)."""

    rank: int
    text: str  # "TensorCore 97% · HBM 12.1/16.0 GiB", or why there are no figures


@dataclass(frozen=True, slots=True)
class Notice:
    """Something tpu_nb changed or noticed in a worker, said once."""

    rank: int
    text: str


Event = (
    WorkerStarted
    | Output
    | WorkerFinished
    | WorkerRaised
    | Progress
    | Heartbeat
    | Diagnosis
    | Stopping
    | CheckpointSaved
    | History
    | Stalled
    | StackReport
    | ChipFigures
    | Notice
)
