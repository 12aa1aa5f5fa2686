"""The XLA doctor's rules: from one worker's readings to causes of compilations and diagnoses (its findings).

Pure logic (no XLA): `probe` takes the readings at each heartbeat and sends
what `Findings.examine` finds. Counts in a `Reading` are totals since the
worker started; rates are measured from the end of warm-up, when the
step's graphs are compiled and every step should look the same. A run too
short for that (no heartbeat between warm-up's end and its own) is judged at
its end from before warm-up ended, and the evidence says the figure is rough.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tpu_nb.wire.events import CompileCause, Diagnosis
from tpu_nb.workers.doctor.analysis_log import Compilation, Frame
from tpu_nb.workers.doctor.input_shapes import varying_input
from tpu_nb.workers.doctor.input_watch import Shapes
from tpu_nb.workers.doctor.places import describe, first_user_frame
from tpu_nb.workers.doctor.span import Span
from tpu_nb.workers.doctor.step_source import Suspect, suspects
from tpu_nb.workers.doctor.transfers import TransferSite
from tpu_nb.workers.doctor.trl_padding import TrlPadding, shape_fix

WARMUP_STEPS = 5
"""The first steps compile the step's graphs (the optimizer's state appears at step 1, ...)."""

MIN_STEPS = 5
"""Steps between two readings before a rate is judged."""

HOST_READS_PER_STEP = 0.5
"""More device-value reads per step than this, beyond tpu_nb's and libraries' (`Reading.own_reads`), slow every step."""

ROUGH_FALLBACKS_PER_STEP = 0.5
"""With warm-up in the span its one-off work counts too, so only ops run about every step are named."""

INPUT_WAIT_FRACTION = 0.3
"""A training thread waiting for batches this share of the time is input-bound."""

HOST_BUSY_FRACTION = 0.8
"""A training thread busy on the host this share of the time (running, or waiting for a core; its waits for batches
left out) is host-bound: it hardly ever waits for the device, so the device waits for it."""

NO_EXECUTION_STEPS = 5
NO_EXECUTION_SECONDS = 2.0
MOST_PLACES = 3
MOST_CAUSES = 3
MOST_OPS = 4  # named in a diagnosis: with the places, it stays one small event (wire.channel)

HOST_READ = "host-reads"
CPU_FALLBACK = "cpu-fallback"
INPUT_BOUND = "input-bound"
HOST_BOUND = "host-bound"
NO_EXECUTION = "no-execution"
PER_SHAPE = "per-shape-compilation"

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
_MADE_FIX = (
    "make it at one fixed size every step (the largest, with a mask or padding for the part a step does not use), "
    "or at a few bucketed sizes (one graph each)"
)
_SLICED_FIX = "keep the full size and mask the unused part (torch.where, or a multiplied 0/1 mask) instead of slicing to a changing size"
_FALLBACK_FIX = "these ops have no XLA lowering: use an equivalent op, or move them out of the training step (into preprocessing)"
_PER_SHAPE_FIX = (
    "give every step the same input shapes: pad to a fixed shape (tokenizer(..., padding='max_length', max_length=N), "
    "torch.nn.functional.pad), or bucket to a few sizes (pad each batch up to the next of, e.g., 64, 128, 256: one graph "
    "per bucket); drop the last partial batch (DataLoader(..., drop_last=True); Trainer: dataloader_drop_last=True)"
)
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
_HOST_FIX = (
    "give the device more work per step: a larger batch (per core; the host's work per step hardly grows with it); "
    "tokenize in the notebook beforehand (dataset.map), not in the loop, the loader or collate_fn; wrap the loader in "
    "MpDeviceLoader (torch_xla.distributed.parallel_loader.MpDeviceLoader(loader, device)), which moves batches to the "
    "device in threads of its own, with num_workers=2-4 for the DataLoader where its dataset is safe to fork"
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
    transfers: tuple[TransferSite, ...] = ()  # the user's calls that moved host tensors to the device, with their shapes
    host: float | None = None  # seconds the training thread ran (or waited for a core) outside its waits for batches


@dataclass(frozen=True, slots=True)
class Examination:
    causes: tuple[CompileCause, ...]  # of this reading's compilations after warm-up
    diagnoses: tuple[Diagnosis, ...]  # new, or with new evidence


@dataclass
class Findings:
    """One worker's findings: each of its readings examined by the doctor's rules, and what was said so far."""

    rank: int
    padding: TrlPadding | None = None  # set when the run's Trainer is TRL's: its config, not a tokenizer call, fixes shapes
    _started: Reading | None = None  # the first reading after the first step
    _baseline: Reading | None = None  # the first reading after warm-up
    _in_warmup: Reading | None = None  # the latest reading before warm-up ended (the worker's start, at the least)
    _previous: Reading | None = None
    _graphs_at: dict[str, set[str]] = field(default_factory=dict)  # place -> graph hashes compiled there
    _frames_at: dict[str, Frame] = field(default_factory=dict)  # place -> its frame, whose source names suspects
    # (place, cause when no place, graph structure) -> {graph hash: compiled during warm-up}
    _alike: dict[tuple[str | None, str, tuple[int | None, int | None]], dict[str, bool]] = field(default_factory=dict)
    _read_places: dict[str, None] = field(default_factory=dict)  # where values were read, in order
    _said: dict[str, Diagnosis] = field(default_factory=dict)

    def examine(self, reading: Reading, final: bool = False) -> Examination:
        """What this reading shows; `final` is the run's last, which judges a short run from before warm-up ended."""
        # This reading's compilations happened after the previous reading: after warm-up if that one was.
        after_warmup = self._previous is not None and self._previous.step >= WARMUP_STEPS
        causes = self._causes(reading, after_warmup)
        self._previous = reading
        if reading.step >= 1 and self._started is None:
            self._started = reading
        if self._baseline is None and reading.step >= WARMUP_STEPS:
            self._baseline = reading
        found = [self._no_execution(reading), self._per_shape(reading)]
        reference = self._reference(reading, final)
        if reference is not None:
            span = Span(reference.step, reading.step, reading.seconds - reference.seconds, reference.step < WARMUP_STEPS)
            found += [
                self._host_reads(reading, reference, span),
                self._fallbacks(reading, reference, span),
                self._input(reading, reference, span),
                self._host_bound(reading, reference, span),
            ]
        if reading.step < WARMUP_STEPS:
            self._in_warmup = reading
        fresh = []
        for diagnosis in found:
            if diagnosis is not None and self._said.get(diagnosis.key) != diagnosis:
                self._said[diagnosis.key] = diagnosis
                fresh.append(diagnosis)
        return Examination(causes, tuple(fresh))

    def _reference(self, reading: Reading, final: bool) -> Reading | None:
        """The reading to measure rates from: the first after warm-up, or at the run's end, the last before it ended."""
        if self._baseline is not None and reading.step - self._baseline.step >= MIN_STEPS:
            return self._baseline
        # Mid-run, a later heartbeat will see past warm-up; a short run's end is the last chance to say anything.
        if final and self._in_warmup is not None and reading.step - self._in_warmup.step >= MIN_STEPS:
            return self._in_warmup
        return None

    def _causes(self, reading: Reading, after_warmup: bool) -> tuple[CompileCause, ...]:
        """Why this reading's new graphs were compiled where others were before: after warm-up, or whenever one only
        differs in sizes (warm-up's graphs that add the optimizer's state differ in inputs and outputs)."""
        causes: dict[CompileCause, None] = {}
        for compilation in reading.compilations:
            frame = first_user_frame(compilation.frames)
            place = describe(frame) if frame is not None else None
            if frame is not None and place is not None:
                self._frames_at.setdefault(place, frame)
            if compilation.reads_a_value and place is not None:
                self._read_places.setdefault(place, None)
            alike = self._alike.setdefault((place, "" if place else compilation.cause, compilation.structure), {})
            # Same place, inputs and outputs: new sizes or constants (without a line of the user's, graphs alike by cause and
            # structure are no evidence: a Trainer's evaluation gathers outputs of several sizes).
            resized = place is not None and any(graph != compilation.graph_hash for graph in alike)
            alike.setdefault(compilation.graph_hash, not after_warmup)
            hashes = self._graphs_at.setdefault(place or compilation.cause, set())
            if compilation.graph_hash in hashes:
                continue
            known_place = bool(hashes)  # the first graph at a place is expected once
            hashes.add(compilation.graph_hash)
            if known_place and (after_warmup or resized):
                causes[self._cause(compilation, frame, place, resized, reading)] = None
        return tuple(causes)[-MOST_CAUSES:]

    def _per_shape(self, reading: Reading) -> Diagnosis | None:
        """The step's graph compiled again for each new input shape, during warm-up, where the recompilation warning does not look."""
        varying = varying_input(reading.shapes, reading.transfers)
        # Graphs alike in inputs and outputs at one place differ in sizes (or constants), not in what they compute,
        # unlike the first steps' graphs that add the optimizer's state.
        repeated = [(key, graphs) for key, graphs in self._alike.items() if sum(graphs.values()) >= 2]
        if not repeated:
            return None
        (place, _cause, _structure), graphs = max(repeated, key=lambda item: len(item[1]))
        if varying is not None and 2 * len(graphs) < len(varying.shapes):
            varying = None  # most of its shapes compiled nothing: the step does not use it (TRL's sequence boundaries)
        if varying is None:
            return self._per_size(reading, place, len(graphs))
        evidence = (
            f"the step's graph was compiled {len(graphs)} times for {len(varying.shapes)} input shapes, {varying.named}: "
            "each new shape compiles the whole step again (on a TPU, each can take minutes)"
        )
        places = [f"{place} ({len(graphs)} graphs)"] if place is not None else []
        if varying.site is not None:
            places.append(f"{describe(varying.site)} ({len(varying.shapes)} shapes)")
        fix = _PER_SHAPE_FIX if self.padding is None else shape_fix(self.padding, varying.dimensions)
        return Diagnosis(self.rank, PER_SHAPE, "Compiled once per input shape", evidence, tuple(places), fix, reading.step)

    def _per_size(self, reading: Reading, place: str | None, graphs: int) -> Diagnosis | None:
        """The step's graph compiled again for sizes its own code makes (on the device, a slice, a data-dependent op)."""
        frame = self._frames_at.get(place) if place is not None else None
        in_step = suspects(frame) if frame is not None else ()
        if not in_step:
            return None
        evidence = (
            f"the step's graph was compiled {graphs} times with the same inputs and outputs: sizes made in the step change "
            "from step to step, and each new size compiles the whole step again (on a TPU, each can take minutes)"
        )
        places = (f"{place} ({graphs} graphs)", *(f"{describe(suspect.frame)} ({_SUSPECT_NAMES[suspect.kind]})" for suspect in in_step))
        fix = _DYNAMIC_FIX if in_step[0].kind == "data-dependent" else _MADE_FIX if in_step[0].kind == "made" else _SLICED_FIX
        return Diagnosis(self.rank, PER_SHAPE, "Compiled once per size", evidence, places[: MOST_PLACES + 1], fix, reading.step)

    def _cause(self, compilation: Compilation, frame: Frame | None, place: str | None, resized: bool, reading: Reading) -> CompileCause:
        """Why a new graph was compiled where another one was before, from the most direct evidence to the least."""
        varying = varying_input(reading.shapes, reading.transfers)
        moved_at = describe(varying.site) if varying is not None and varying.site is not None else None
        change = shape_change(reading.shapes)
        if change is not None:
            dimension, was, now = change
            fix = _SHAPE_FIX[dimension] if self.padding is None else shape_fix(self.padding, frozenset({dimension}))
            return CompileCause(f"input shape changed ({dimension} {now} vs {was})", moved_at or place, fix)
        if varying is not None and moved_at is not None:
            return CompileCause(f"input shapes moved to the device change ({varying.named})", moved_at, _PER_SHAPE_FIX)
        in_step = suspects(frame) if frame is not None else ()
        dynamic = sorted(DYNAMIC_SHAPE_OPS & set(reading.fallbacks))
        if dynamic:
            op = dynamic[0].removeprefix("aten::")
            where = next((describe(suspect.frame) for suspect in in_step if suspect.kind == "data-dependent"), None)
            where = where or next((read for read in self._read_places if op in read), place)
            return CompileCause(f"a data-dependent op (.{op}()): its result's size depends on the values", where, _DYNAMIC_FIX)
        if compilation.reads_a_value:
            return CompileCause("a value was read from the device in the middle of the step", place, _HOST_READ_FIX)
        if in_step:
            return _suspect_cause(in_step[0])
        if resized:
            return CompileCause(
                "the step's graph compiled again with the same inputs and outputs: a size or a Python number in it changes between steps",
                place,
                _GRAPH_CHANGED_FIX,
            )
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

    def _host_reads(self, reading: Reading, reference: Reading, span: Span) -> Diagnosis | None:
        reads = (reading.host_reads - reading.own_reads) - (reference.host_reads - reference.own_reads)
        if reads / span.steps < HOST_READS_PER_STEP:
            return None
        places = {f"{describe(frame)} ({count} reads)": None for frame, count in reading.read_places}
        places.update((place, None) for place in self._read_places if _HOST_READ_SOURCE.search(place.partition(": ")[2]))
        evidence = (
            f"{reads / span.steps:.1f} reads of a device value per step ({span.text}): "
            "each waits for the graph to run, so the host cannot trace the next step meanwhile"
        )
        return Diagnosis(self.rank, HOST_READ, "Host syncs", evidence, tuple(places)[:MOST_PLACES], _HOST_READ_FIX, reading.step)

    def _fallbacks(self, reading: Reading, reference: Reading, span: Span) -> Diagnosis | None:
        least = ROUGH_FALLBACKS_PER_STEP * span.steps if span.includes_warmup else 1
        grown = {name: count - reference.fallbacks.get(name, 0) for name, count in reading.fallbacks.items()}
        grown = {name: count for name, count in grown.items() if count >= least}
        if not grown:
            return None
        busiest = sorted(grown.items(), key=lambda item: -item[1])[:MOST_OPS]
        listed = ", ".join(f"{name} ({count / span.steps:.1f} per step)" for name, count in busiest)
        places = tuple(place for place in self._read_places if not _HOST_READ_SOURCE.search(place.partition(": ")[2]))
        fix = _DYNAMIC_FIX if DYNAMIC_SHAPE_OPS & set(grown) else _FALLBACK_FIX
        evidence = f"ops that ran on the CPU instead of the TPU: {listed} ({span.text})"
        return Diagnosis(self.rank, CPU_FALLBACK, "CPU fallbacks", evidence, places[:MOST_PLACES], fix, reading.step)

    def _input(self, reading: Reading, reference: Reading, span: Span) -> Diagnosis | None:
        waited = reading.input_wait - reference.input_wait
        if span.seconds < NO_EXECUTION_SECONDS or waited / span.seconds < INPUT_WAIT_FRACTION:
            return None
        evidence = (
            f"the training thread waited for its next batch {waited / span.seconds:.0%} of the time "
            f"({waited / span.steps:.2f} s of each {span.seconds / span.steps:.2f} s step; {span.text}): "
            "the device sits idle meanwhile"
        )
        return Diagnosis(self.rank, INPUT_BOUND, "Input-bound", evidence, (), _INPUT_FIX, reading.step)

    def _host_bound(self, reading: Reading, reference: Reading, span: Span) -> Diagnosis | None:
        if reading.host is None or reference.host is None or span.seconds < NO_EXECUTION_SECONDS:
            return None
        busy = reading.host - reference.host
        if busy / span.seconds < HOST_BUSY_FRACTION:
            return None
        evidence = (
            f"the training thread was busy on the host {busy / span.seconds:.0%} of the time ({busy / span.steps:.3f} s of "
            f"each {span.seconds / span.steps:.3f} s step, tracing the step's graph and running Python; {span.text}): it "
            "hardly ever waits for the device, so the device waits for it"
        )
        return Diagnosis(self.rank, HOST_BOUND, "Host-bound", evidence, (), _HOST_FIX, reading.step)


_SUSPECT_NAMES = {"made": "made on the device", "sliced": "sliced", "data-dependent": "data-dependent size"}


def _suspect_cause(suspect: Suspect) -> CompileCause:
    """The cause a line of the step's own code explains: a size it makes changes between steps."""
    place = describe(suspect.frame)
    if suspect.kind == "made":
        return CompileCause("a tensor made on the device at a size that changes between steps", place, _MADE_FIX)
    if suspect.kind == "sliced":
        return CompileCause("a slice to a size that changes between steps", place, _SLICED_FIX)
    return CompileCause("a data-dependent op: its result's size depends on the values", place, _DYNAMIC_FIX)


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
