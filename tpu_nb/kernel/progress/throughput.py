"""Tokens/s, samples/s, MFU and where a step's time goes, folded from a run's events: what the dashboard, the summary and
the run log say of its speed.

Pure logic (stdlib only). Rates come from rank 0's counts (`Counted`, on its
reports) and the doctor's readings of where the training threads' time
went (`TimeSpent`, on the heartbeats), each stamped with the worker's own
clock, so the kernel's delivery never bends them. Only training counts:
a report of another phase (an evaluation) breaks the measure, which
resumes at the next training report. Live figures are measured over the
last `RATE_WINDOW_SECONDS`; a run's over its steps after warm-up (from the
first report of a step past it), or over all its steps when it ended
before one came.

MFU = tokens/s x FLOPs per token / (chips x a chip's peak bf16 FLOP/s):
FLOPs per token from `flops_per_token` (the user's) or the model's own
estimate (a Trainer's), the peak from `tpu_nb.runtime.peaks` for the run's
generation. Off-TPU and for a chip without a known peak there is none, and
`Throughput.no_mfu` says why. `TPU_NB_TEST_PEAK_FLOPS` stands in for a
chip's peak, for testing MFU on XLA:CPU (its devices count as the chips).
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from tpu_nb.kernel.progress.recompilation import WARMUP_STEPS
from tpu_nb.runtime import RuntimeInfo
from tpu_nb.runtime.peaks import peak_bf16_flops
from tpu_nb.wire.events import Counted, Event, Heartbeat, Progress, TimeSpent

RATE_WINDOW_SECONDS = 20.0
"""Live figures are measured over this recent window of the workers' time."""
STAND_IN_PEAK = "TPU_NB_TEST_PEAK_FLOPS"
"""For tests: FLOP/s that stand in for a chip's peak, so MFU is measured where there is none (XLA:CPU)."""
TRAIN_PHASE = "train"

NO_FLOPS_PER_TOKEN = "no MFU without FLOPs per token: give --flops-per-token N (flops_per_token=N); a Trainer's model gives its own"
OFF_TPU = "no MFU off-TPU: XLA:CPU has no chip peak to measure it against"


@dataclass(frozen=True, slots=True)
class Basis:
    """What MFU is measured against: the run's chips, a chip's peak bf16 FLOP/s (None: `no_peak` says why), and the
    FLOPs per token the user gave (None: the model's own, where its worker knows it)."""

    chips: int
    peak: float | None
    no_peak: str | None
    flops_per_token: float | None = None


def host_basis(info: RuntimeInfo, devices: int, flops_per_token: float | None, environ: Mapping[str, str] | None = None) -> Basis:
    """The basis of a run on this host's `devices` XLA devices (a TPU's chips hold `devices_per_chip` each)."""
    chips = max(devices // info.tpu.devices_per_chip, 1) if info.tpu is not None else devices
    stand_in = _stand_in(os.environ if environ is None else environ)
    if stand_in is not None:
        return Basis(chips, *stand_in, flops_per_token)
    if info.tpu is None:
        return Basis(chips, None, OFF_TPU, flops_per_token)
    return generation_basis(info.tpu.generation, chips, flops_per_token)


def generation_basis(generation: str, chips: int, flops_per_token: float | None) -> Basis:
    """The basis of a run on `chips` TPU chips of a generation ("v5e"; a pod slice's too)."""
    peak = peak_bf16_flops(generation)
    if peak is None:
        why = (
            "no MFU: a TPU v2 or v3, and their peaks differ (TPU_ACCELERATOR_TYPE, e.g. v3-8, tells which)"
            if generation == "v2/v3"
            else f"no MFU: TPU {generation}'s peak is not known to tpu_nb"
        )
        return Basis(chips, None, why, flops_per_token)
    return Basis(chips, peak, None, flops_per_token)


def _stand_in(environ: Mapping[str, str]) -> tuple[float | None, str | None] | None:
    """The test's stand-in peak: (peak, None), (None, why) for a value that is not one, or None when not set."""
    text = environ.get(STAND_IN_PEAK)
    if text is None:
        return None
    try:
        peak = float(text)
    except ValueError:
        peak = math.nan
    if not math.isfinite(peak) or peak <= 0:
        return None, f"no MFU: {STAND_IN_PEAK}={text!r} is not a positive number of FLOP/s"
    return peak, None


@dataclass(frozen=True, slots=True)
class TimeSplit:
    """Where a step's time went, in seconds per step, from the training threads' point of view."""

    step: float
    input_wait: float  # waiting for the next batch
    device: float  # waiting for the device (neither working on the host nor waiting for a batch)
    host: float  # working on the host: tracing the step's graph, Python

    def share(self, part: float) -> float:
        return part / self.step if self.step > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Throughput:
    """A run's speed: tokens/s (all chips), samples/s, MFU (None: `no_mfu` says why), and the step's time split."""

    tokens_per_second: float | None = None
    samples_per_second: float | None = None
    chips: int = 1
    mfu: float | None = None
    no_mfu: str | None = None
    split: TimeSplit | None = None

    @property
    def tokens_per_second_per_chip(self) -> float | None:
        return None if self.tokens_per_second is None else self.tokens_per_second / max(self.chips, 1)


@dataclass
class _Sums:
    """Counts and worker seconds between consecutive training reports, summed."""

    seconds: float = 0.0
    tokens: int = 0
    token_seconds: float = 0.0
    samples: int = 0
    sample_seconds: float = 0.0

    def add(self, before: Counted, after: Counted) -> None:
        elapsed = after.seconds - before.seconds
        if elapsed <= 0:
            return
        self.seconds += elapsed
        if before.tokens is not None and after.tokens is not None:
            self.tokens += after.tokens - before.tokens
            self.token_seconds += elapsed
        if before.samples is not None and after.samples is not None:
            self.samples += after.samples - before.samples
            self.sample_seconds += elapsed

    def rates(self) -> tuple[float | None, float | None]:
        tokens = self.tokens / self.token_seconds if self.token_seconds > 0 else None
        samples = self.samples / self.sample_seconds if self.sample_seconds > 0 else None
        return tokens, samples


class ThroughputMeter:
    """Folds a run's events into its speed: `live()` for the dashboard, `overall()` for the summary and the run log."""

    def __init__(self, basis: Basis | None = None) -> None:
        self.basis = basis if basis is not None else Basis(1, None, None)  # set when the run starts, before its events
        self._last: Counted | None = None  # the latest training report's counts (None after another phase's report)
        self._last_step: int | None = None
        self._window: deque[tuple[Counted, Counted]] = deque()  # consecutive training reports in the live window
        self._all = _Sums()  # every pair of consecutive training reports
        self._after_warmup = _Sums()  # those from a step past warm-up on
        self._flops_per_token: float | None = None  # the model's, as its worker last said
        self._spent: dict[int, deque[TimeSpent]] = {}  # each rank's readings in the live window (and one before)
        self._spent_first: dict[int, TimeSpent] = {}  # each rank's first reading
        self._spent_warm: dict[int, TimeSpent] = {}  # each rank's first reading past warm-up
        self._spent_last: dict[int, TimeSpent] = {}
        self.curve: list[tuple[int, float]] = []  # (step, live tokens/s) at each training report: the run log's curve

    def on_event(self, event: Event) -> None:
        if isinstance(event, Progress):
            self._on_progress(event)
        elif isinstance(event, Heartbeat) and event.spent is not None:
            self._on_spent(event.rank, event.spent)

    def live(self) -> Throughput:
        """The speed over the last `RATE_WINDOW_SECONDS` of the workers' time."""
        sums = _Sums()
        for before, after in self._window:
            sums.add(before, after)
        split = _split({rank: (readings[0], readings[-1]) for rank, readings in self._spent.items()})
        return self._throughput(sums, split)

    def overall(self) -> Throughput:
        """The run's speed over its steps after warm-up (over all of them when it ended before a report past warm-up)."""
        sums = self._after_warmup if self._after_warmup.seconds > 0 else self._all
        spans = {}
        for rank, last in self._spent_last.items():
            warm = self._spent_warm.get(rank)
            spans[rank] = (warm if warm is not None and last.steps > warm.steps else self._spent_first[rank], last)
        return self._throughput(sums, _split(spans))

    def _on_progress(self, event: Progress) -> None:
        counted = event.counted
        if event.phase not in (None, TRAIN_PHASE) or counted is None or event.step is None:
            if event.phase not in (None, TRAIN_PHASE):
                self._last = None  # an evaluation between two training reports is not training time
            return
        if counted.flops_per_token is not None:
            self._flops_per_token = counted.flops_per_token
        last, last_step = self._last, self._last_step
        self._last, self._last_step = counted, event.step
        if last is None or last_step is None or counted.seconds <= last.seconds:
            return
        pair = (last, counted)
        self._all.add(*pair)
        if last_step >= WARMUP_STEPS:
            self._after_warmup.add(*pair)
        self._window.append(pair)
        while self._window and self._window[0][1].seconds < counted.seconds - RATE_WINDOW_SECONDS:
            self._window.popleft()
        tokens = self.live().tokens_per_second
        if tokens is not None:
            self.curve.append((event.step, tokens))

    def _on_spent(self, rank: int, spent: TimeSpent) -> None:
        readings = self._spent.setdefault(rank, deque())
        if readings and spent.seconds <= readings[-1].seconds:
            return
        readings.append(spent)
        # One reading older than the window stays as its start, so sparse readings still give a split.
        while len(readings) > 1 and readings[1].seconds <= spent.seconds - RATE_WINDOW_SECONDS:
            readings.popleft()
        self._spent_first.setdefault(rank, spent)
        if spent.steps >= WARMUP_STEPS:
            self._spent_warm.setdefault(rank, spent)
        self._spent_last[rank] = spent

    def _throughput(self, sums: _Sums, split: TimeSplit | None) -> Throughput:
        tokens, samples = sums.rates()
        basis = self.basis
        mfu, no_mfu = None, None
        if tokens is not None:
            flops = basis.flops_per_token if basis.flops_per_token is not None else self._flops_per_token
            if flops is None:
                no_mfu = NO_FLOPS_PER_TOKEN
            elif basis.peak is None:
                no_mfu = basis.no_peak
            else:
                mfu = tokens * flops / (max(basis.chips, 1) * basis.peak)
        return Throughput(tokens, samples, basis.chips, mfu, no_mfu, split)


def _split(spans: Mapping[int, tuple[TimeSpent, TimeSpent]]) -> TimeSplit | None:
    """The time per step over each rank's span (first and last reading), averaged over the ranks; None without a step."""
    steps = seconds = waited = host = 0.0
    for first, last in spans.values():
        if last.steps <= first.steps or last.seconds <= first.seconds:
            continue
        steps += last.steps - first.steps
        seconds += last.seconds - first.seconds
        waited += max(last.input_wait - first.input_wait, 0.0)
        host += max(last.host - first.host, 0.0)
    if steps <= 0:
        return None
    step, waited, host = seconds / steps, waited / steps, host / steps
    waited, host = min(waited, step), min(host, step - min(waited, step))
    return TimeSplit(step, waited, max(step - waited - host, 0.0), host)
