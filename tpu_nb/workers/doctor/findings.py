"""The XLA doctor's rules: from one worker's readings to causes of compilations and diagnoses.

Pure logic (no XLA): `probe` takes the readings at each heartbeat and sends
what `Doctor.examine` finds. Counts in a `Reading` are totals since the
worker started; rates are measured from the end of warm-up, when the
step's graphs are compiled and every step should look the same.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tpu_nb.wire.events import CompileCause, Diagnosis

from .analysis_log import Compilation, Frame
from .input_watch import Shapes
from .places import describe, first_user_frame

WARMUP_STEPS = 5
"""The first steps compile the step's graphs (the optimizer's state appears at step 1, ...)."""

MIN_STEPS = 5
"""Steps after warm-up before a rate is judged."""

HOST_READS_PER_STEP = 0.5
"""More device-value reads per step than this, beyond tpu_nb's and libraries' (`Reading.own_reads`), slow every step."""

INPUT_WAIT_FRACTION = 0.3
"""A training thread waiting for batches this share of the time is input-bound."""

NO_EXECUTION_STEPS = 5
NO_EXECUTION_SECONDS = 2.0
MOST_PLACES = 3
MOST_CAUSES = 3
MOST_OPS = 4  # named in a diagnosis: with the places, it stays one small event (wire.channel)

HOST_READ = "host-reads"
CPU_FALLBACK = "cpu-fallback"
INPUT_BOUND = "input-bound"
NO_EXECUTION = "no-execution"

DYNAMIC_SHAPE_OPS = frozenset({"aten::nonzero", "aten::masked_select", "aten::unique", "aten::_unique2", "aten::unique_consecutive"})
_HOST_READ_SOURCE = re.compile(r"\.item\(|\.tolist\(|\.cpu\(|\.numpy\(|\bprint\(|\bfloat\(|\bint\(|\bbool\(|^\s*(if|elif|while|assert)\b")

_SHAPE_FIX = {
    "batch": "drop the last partial batch (DataLoader(..., drop_last=True); Trainer: dataloader_drop_last=True)",
    "length": "pad every batch to one length (tokenizer(..., padding='max_length', max_length=N))",
}
_GRAPH_CHANGED_FIX = (
    "make every step trace the same graph: pad inputs to a fixed length (padding='max_length', max_length=...) and "
    "drop the last partial batch (drop_last=True / dataloader_drop_last=True); branch on the device (torch.where) "
    "instead of `if tensor:`; pass numbers that change each step (a step count, a Python-side learning rate) as tensors"
)
_DYNAMIC_FIX = (
    "use a fixed-size form: torch.where(mask, x, 0) or a masked sum instead of x[mask] / .nonzero(); "
    "its output size depends on the values, so XLA runs it on the CPU and recompiles what follows"
)
_FALLBACK_FIX = "these ops have no XLA lowering: use an equivalent op, or move them out of the training step (into preprocessing)"
_HOST_READ_FIX = (
    "read values lazily: pass tensors to report(loss=...), which reads them after the step has run "
    "(measured by benchmarks/host_sync.py on a small BERT, XLA:CPU: 1.11x the steps/s of a per-step .item()); "
    "print or .item() every N steps, not every step; branch on the device (torch.where), not with `if tensor:`"
)
_INPUT_FIX = (
    "wrap the loader in MpDeviceLoader (torch_xla.distributed.parallel_loader.MpDeviceLoader(loader, device)) "
    "so batches load while the device computes; tokenize in the notebook beforehand (dataset.map), not in the "
    "loader or collate_fn; give the DataLoader num_workers=2-4 where its dataset is safe to fork"
)
_NO_EXECUTION_FIX = (
    "cut the graph every step: iterate over MpDeviceLoader(loader, device) (it cuts the graph after each batch), "
    "or call torch_xla.sync() (xm.mark_step()) after optimizer step; end this run now with Kill or a second interrupt, "
    "before memory runs out (a graceful stop would run the whole accumulated graph)"
)


@dataclass(frozen=True, slots=True)
class Reading:
    """What the probe read in one worker at one heartbeat (counts since the worker started)."""

    step: int  # steps reported so far (the step number, or calls to report())
    seconds: float  # a monotonic clock
    executions: int  # graphs run on the device
    host_reads: int  # device values read by the host (aten::_local_scalar_dense)
    own_reads: int  # of those, tpu_nb's and other libraries' (report()'s lazy values, the Trainer's logging)
    fallbacks: Mapping[str, int]  # other aten:: ops that ran on the CPU, by name
    input_wait: float  # seconds the training thread waited for batches
    compilations: tuple[Compilation, ...] = ()  # compiled since the last reading
    shapes: tuple[Shapes, ...] = ()  # the distinct batch shapes seen, in order
    read_places: tuple[tuple[Frame, int], ...] = ()  # the user's lines that read device values, by reads


@dataclass(frozen=True, slots=True)
class Examination:
    causes: tuple[CompileCause, ...]  # of this reading's compilations after warm-up
    diagnoses: tuple[Diagnosis, ...]  # new, or with new evidence


@dataclass
class Doctor:
    """Examines one worker's readings; remembers what it has said."""

    rank: int
    _started: Reading | None = None  # the first reading after the first step
    _baseline: Reading | None = None  # the first reading after warm-up
    _previous: Reading | None = None
    _graphs_at: dict[str, set[str]] = field(default_factory=dict)  # place -> graph hashes compiled there
    _read_places: dict[str, None] = field(default_factory=dict)  # where values were read, in order
    _said: dict[str, Diagnosis] = field(default_factory=dict)

    def examine(self, reading: Reading) -> Examination:
        causes = self._causes(reading)
        # This reading's compilations happened after the previous reading: after warm-up if that one was.
        after_warmup = self._previous is not None and self._previous.step >= WARMUP_STEPS
        self._previous = reading
        if reading.step >= 1 and self._started is None:
            self._started = reading
        if self._baseline is None and reading.step >= WARMUP_STEPS:
            self._baseline = reading
        found = [self._no_execution(reading)]
        if self._baseline is not None:
            found += [
                self._host_reads(reading, self._baseline),
                self._fallbacks(reading, self._baseline),
                self._input(reading, self._baseline),
            ]
        fresh = []
        for diagnosis in found:
            if diagnosis is not None and self._said.get(diagnosis.key) != diagnosis:
                self._said[diagnosis.key] = diagnosis
                fresh.append(diagnosis)
        return Examination(causes if after_warmup else (), tuple(fresh))

    def _causes(self, reading: Reading) -> tuple[CompileCause, ...]:
        causes: dict[CompileCause, None] = {}
        for compilation in reading.compilations:
            frame = first_user_frame(compilation.frames)
            place = describe(frame) if frame is not None else None
            if compilation.reads_a_value and place is not None:
                self._read_places.setdefault(place, None)
            hashes = self._graphs_at.setdefault(place or compilation.cause, set())
            if compilation.graph_hash in hashes:
                continue
            cause = self._cause(compilation, place, known_place=bool(hashes), reading=reading)
            hashes.add(compilation.graph_hash)
            if cause is not None:
                causes[cause] = None
        return tuple(causes)[-MOST_CAUSES:]

    def _cause(self, compilation: Compilation, place: str | None, known_place: bool, reading: Reading) -> CompileCause | None:
        """Why a new graph was compiled where another one was before; None for the first graph at a place (expected once)."""
        if not known_place:
            return None
        change = shape_change(reading.shapes)
        if change is not None:
            dimension, was, now = change
            return CompileCause(f"input shape changed ({dimension} {now} vs {was})", place, _SHAPE_FIX[dimension])
        dynamic = sorted(DYNAMIC_SHAPE_OPS & set(reading.fallbacks))
        if dynamic:
            return CompileCause(f"dynamic shape from .{dynamic[0].removeprefix('aten::')}()", place, _DYNAMIC_FIX)
        if compilation.reads_a_value:
            return CompileCause("a value was read from the device in the middle of the step", place, _HOST_READ_FIX)
        return CompileCause(
            "the step's graph changed (tensor sizes, Python control flow on a tensor value, or a changing Python number)",
            place,
            _GRAPH_CHANGED_FIX,
        )

    def _no_execution(self, reading: Reading) -> Diagnosis | None:
        started = self._started
        if started is None or reading.executions > 0 or reading.step < NO_EXECUTION_STEPS:
            return None
        if reading.seconds - started.seconds < NO_EXECUTION_SECONDS:
            return None
        evidence = (
            f"{reading.step} steps reported, but nothing has run on the device yet: each step adds to one ever-growing "
            "graph, which will run (and may exhaust memory) only when something reads a value"
        )
        return Diagnosis(self.rank, NO_EXECUTION, "The loop never runs its graph", evidence, (), _NO_EXECUTION_FIX, reading.step)

    def _host_reads(self, reading: Reading, baseline: Reading) -> Diagnosis | None:
        steps = reading.step - baseline.step
        reads = (reading.host_reads - reading.own_reads) - (baseline.host_reads - baseline.own_reads)
        if steps < MIN_STEPS or reads / steps < HOST_READS_PER_STEP:
            return None
        places = {f"{describe(frame)} ({count} reads)": None for frame, count in reading.read_places}
        places.update((place, None) for place in self._read_places if _HOST_READ_SOURCE.search(place.partition(": ")[2]))
        evidence = (
            f"{reads / steps:.1f} reads of a device value per step (steps {baseline.step}–{reading.step}): "
            "each waits for the graph to run, so the host cannot trace the next step meanwhile"
        )
        return Diagnosis(self.rank, HOST_READ, "Host syncs", evidence, tuple(places)[:MOST_PLACES], _HOST_READ_FIX, reading.step)

    def _fallbacks(self, reading: Reading, baseline: Reading) -> Diagnosis | None:
        steps = reading.step - baseline.step
        grown = {name: count - baseline.fallbacks.get(name, 0) for name, count in reading.fallbacks.items()}
        grown = {name: count for name, count in grown.items() if count > 0}
        if steps < MIN_STEPS or not grown:
            return None
        busiest = sorted(grown.items(), key=lambda item: -item[1])[:MOST_OPS]
        listed = ", ".join(f"{name} ({count / steps:.1f} per step)" for name, count in busiest)
        places = tuple(place for place in self._read_places if not _HOST_READ_SOURCE.search(place.partition(": ")[2]))
        fix = _DYNAMIC_FIX if DYNAMIC_SHAPE_OPS & set(grown) else _FALLBACK_FIX
        evidence = f"ops that ran on the CPU instead of the TPU after warm-up: {listed}"
        return Diagnosis(self.rank, CPU_FALLBACK, "CPU fallbacks", evidence, places[:MOST_PLACES], fix, reading.step)

    def _input(self, reading: Reading, baseline: Reading) -> Diagnosis | None:
        steps = reading.step - baseline.step
        seconds = reading.seconds - baseline.seconds
        waited = reading.input_wait - baseline.input_wait
        if steps < MIN_STEPS or seconds < NO_EXECUTION_SECONDS or waited / seconds < INPUT_WAIT_FRACTION:
            return None
        evidence = (
            f"the training thread waited for its next batch {waited / seconds:.0%} of the time "
            f"({waited / steps:.2f} s of each {seconds / steps:.2f} s step): the device sits idle meanwhile"
        )
        return Diagnosis(self.rank, INPUT_BOUND, "Input-bound", evidence, (), _INPUT_FIX, reading.step)


def shape_change(shapes: tuple[Shapes, ...]) -> tuple[str, int, int] | None:
    """("batch" | "length", first size, newest size) where the newest batch shape differs from the first; None if none does."""
    if len(shapes) < 2:
        return None
    first, latest = shapes[0], shapes[-1]
    for was_shape, now_shape in zip(first, latest, strict=False):
        for dimension, (was, now) in enumerate(zip(was_shape, now_shape, strict=False)):
            if was != now:
                return ("batch" if dimension == 0 else "length", was, now)
    return None
