"""Progress as plain text: a rate-limited status line for terminals and scripts.

The formatting helpers here are shared with the widget dashboard and the
static summary, so every view words things the same way.
"""

from __future__ import annotations

import sys
from typing import TextIO

from tpu_nb.basics.units import format_bytes, format_duration
from tpu_nb.kernel.endings.status import RunStatus
from tpu_nb.kernel.progress.recompilation import CompileLevel, CompileVerdict
from tpu_nb.kernel.progress.snapshot import EVAL_PREFIX, TRAINING_LOSS, ProgressSnapshot
from tpu_nb.kernel.progress.state import ProgressState
from tpu_nb.kernel.progress.throughput import Throughput, TimeSplit
from tpu_nb.wire.events import Diagnosis, Event
from tpu_nb.wire.stacks import StackReport

HealthLevel = CompileLevel


class TextProgress:
    """Writes a one-line status at most every `min_interval` seconds, and a final line.

    `stream` defaults to sys.stderr as it is when the display is made (pytest
    and ipykernel replace it after import).
    """

    def __init__(self, progress: ProgressState, stream: TextIO | None = None, min_interval: float = 5.0) -> None:
        self.progress = progress
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval = min_interval
        self._line_written_at: float | None = None
        self._notices_written = 0
        self._warning_written = False
        self._diagnoses_written: set[str] = set()

    def on_event(self, event: Event) -> None:
        self.progress.on_event(event)
        if isinstance(event, StackReport):  # said at once, not at the next status line
            self._write(f"tpu_nb watchdog: {event}")
            return
        now = self.progress.clock()
        if self._line_written_at is not None and now - self._line_written_at < self.min_interval:
            return
        self._line_written_at = now
        snapshot = self.progress.snapshot()
        self._write_news(snapshot)
        self._write(status_line(snapshot))

    def finish(self, status: RunStatus, detail: str | None = None) -> None:
        self.progress.finish(status, detail)
        snapshot = self.progress.snapshot()
        self._write_news(snapshot)
        self._write(final_line(snapshot))
        if detail:
            self._write(detail)

    def _write_news(self, snapshot: ProgressSnapshot) -> None:
        """Notices and the compile health warning, each said once."""
        for notice in snapshot.notices[self._notices_written :]:
            self._write(f"note: {notice}")
        self._notices_written = len(snapshot.notices)
        if snapshot.compiles.level == "warning" and not self._warning_written:
            self._warning_written = True
            self._write(f"warning: {recompilation_text(snapshot.compiles)}")
        for diagnosis in snapshot.diagnoses:
            if diagnosis.key not in self._diagnoses_written:
                self._diagnoses_written.add(diagnosis.key)
                self._write(f"XLA doctor: {diagnosis_text(diagnosis)}")

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()


def status_line(snapshot: ProgressSnapshot) -> str:
    """E.g. "step 120/500 (24%) | loss 0.412 | 3.1 steps/s | ETA 2m02s | compilations: 7 | workers 8/8"."""
    if snapshot.step is None:
        parts = [f"{snapshot.phase} {format_duration(snapshot.elapsed)}"]
    elif snapshot.phase == "training":
        parts = [step_text(snapshot)]
    else:
        parts = [f"{step_text(snapshot)} {snapshot.phase}"]
    if TRAINING_LOSS in snapshot.latest:
        parts.append(f"loss {format_value(snapshot.latest[TRAINING_LOSS])}")
    if snapshot.steps_per_second is not None:
        parts.append(f"{format_rate(snapshot.steps_per_second)} steps/s")
    parts += speed_parts(snapshot.throughput)
    if snapshot.eta is not None:
        parts.append(f"ETA {format_duration(snapshot.eta)}")
    if snapshot.compile_count:
        parts.append(f"compilations: {snapshot.compile_count}")
    parts.append(workers_text(snapshot))
    if snapshot.checkpoint is not None:
        parts.append(snapshot.checkpoint)
    return " | ".join(parts)


def final_line(snapshot: ProgressSnapshot) -> str:
    """E.g. "%%tpu_train done after 3m12s | step 500/500 | loss 0.21 | eval_loss 0.3 | compilations: 7"."""
    parts = [f"{snapshot.title} {snapshot.phase} after {format_duration(snapshot.elapsed)}"]
    if snapshot.step is not None:
        parts.append(step_text(snapshot))
    parts += [f"{name} {format_value(value)}" for name, value in final_metrics(snapshot)]
    parts += speed_parts(snapshot.throughput)
    if snapshot.compile_count:
        parts.append(f"compilations: {snapshot.compile_count}")
    return " | ".join(parts)


def speed_parts(throughput: Throughput) -> list[str]:
    """Tokens/s and MFU in a few words each, for a one-line status: ["1,234 tokens/s", "MFU 41.2%"]."""
    parts = []
    if throughput.tokens_per_second is not None:
        parts.append(f"{format_count_rate(throughput.tokens_per_second)} tokens/s")
    if throughput.mfu is not None:
        parts.append(f"MFU {format_mfu(throughput.mfu)}")
    return parts


def throughput_text(throughput: Throughput) -> str | None:
    """ "1,234 tokens/s (617 per chip) · 12 samples/s · MFU 41.2%", or why there is no MFU; None with nothing counted."""
    parts = []
    tokens, per_chip = throughput.tokens_per_second, throughput.tokens_per_second_per_chip
    if tokens is not None and per_chip is not None:
        chips = "" if throughput.chips <= 1 else f" ({format_count_rate(per_chip)} per chip)"
        parts.append(f"{format_count_rate(tokens)} tokens/s{chips}")
    if throughput.samples_per_second is not None:
        parts.append(f"{format_count_rate(throughput.samples_per_second)} samples/s")
    if throughput.mfu is not None:
        parts.append(f"MFU {format_mfu(throughput.mfu)}")
    elif throughput.no_mfu is not None:
        parts.append(throughput.no_mfu)
    return " · ".join(parts) or None


def split_text(split: TimeSplit) -> str:
    """ "a step 120 ms: waiting for input 6 ms (5%), the device 96 ms (80%), the host 18 ms (15%)"."""
    shares = ", ".join(
        f"{name} {format_seconds(part)} ({split.share(part):.0%})"
        for name, part in (("waiting for input", split.input_wait), ("the device", split.device), ("the host", split.host))
    )
    return f"a step {format_seconds(split.step)}: {shares}"


def format_seconds(seconds: float) -> str:
    """ "120 ms", "2.5 s"."""
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def format_count_rate(per_second: float) -> str:
    """A rate of things counted: "12,345", "12.3", "0.5"."""
    return f"{per_second:,.0f}" if per_second >= 100 else format_rate(per_second)


def format_mfu(mfu: float) -> str:
    """ "41.2%", "0.0032%"."""
    return f"{mfu:.1%}" if mfu >= 0.001 else f"{mfu * 100:.2g}%"


def final_metrics(snapshot: ProgressSnapshot) -> list[tuple[str, float]]:
    """The training loss and the evaluation metrics, as last logged."""
    return [(name, snapshot.latest[name]) for name in snapshot.metric_names if name == TRAINING_LOSS or name.startswith(EVAL_PREFIX)]


def step_text(snapshot: ProgressSnapshot) -> str:
    if snapshot.step is None:
        return "no step yet"
    if snapshot.max_steps is None:
        return f"step {snapshot.step}"
    fraction = snapshot.fraction_done or 0.0
    return f"step {snapshot.step}/{snapshot.max_steps} ({fraction:.0%})"


def workers_text(snapshot: ProgressSnapshot) -> str:
    text = f"workers {len(snapshot.workers)}/{snapshot.expected_workers}"
    failed = len(snapshot.failures)
    return f"{text} ({failed} failed)" if failed else text


def health(snapshot: ProgressSnapshot) -> tuple[HealthLevel, str]:
    """The XLA health line: compilations (did the steps after warm-up compile again?), device memory, the compilation cache."""
    resources = "".join(f"; {part}" for part in (memory_text(snapshot.memory), cache_text(snapshot.cache)) if part)
    verdict = snapshot.compiles
    count = snapshot.compile_count
    compiled = f"{count} XLA compilation{'' if count == 1 else 's'}"
    if count:
        compiled += f" ({format_duration(snapshot.compile_seconds)} compiling)"
    level = verdict.level
    if level == "warning":
        return level, f"{compiled}: {verdict.headline}. {verdict.explanation}{resources}"
    if level == "pending":
        return level, f"{compiled} so far ({verdict.headline}){resources}"
    return level, f"{compiled}, {verdict.headline}{resources}"


def recompilation_text(verdict: CompileVerdict) -> str:
    """ "XLA compiled again at 12 of 13 steps after warm-up (step 5), first at step 6 (rank 0). Why: ... Fix: ..."."""
    return f"XLA {verdict.headline}. {verdict.explanation}"


def health_brief(snapshot: ProgressSnapshot) -> str:
    """The health in a few words, for the one line shown when nothing needs attention."""
    count = snapshot.compile_count
    verdict = snapshot.compiles
    compilations = f"{count} compilation{'' if count == 1 else 's'}"
    if verdict.level == "warning":
        parts = [f"recompiling: {verdict.compiled} of {verdict.judged} steps after warm-up compiled again"]
    elif verdict.level == "stable":
        parts = [f"{compilations}, stable"]
    elif verdict.level == "unjudged":
        parts = [f"{compilations}, {verdict.steps} step{'' if verdict.steps == 1 else 's'}: too short to judge"]
    else:
        parts = [f"{compilations} so far"]
    parts.append(workers_text(snapshot))
    parts += [
        f"{snapshot.worker_noun} {worker.rank} silent {format_duration(worker.seconds_since_heard)}"
        for worker in snapshot.workers
        if worker.stale
    ]
    if snapshot.memory is not None:
        used, limit = snapshot.memory
        parts.append(f"memory {used / max(limit, 1):.0%}")
    if snapshot.diagnoses:
        found = len(snapshot.diagnoses)
        parts.append(f"XLA doctor: {found} finding{'' if found == 1 else 's'}")
    return " · ".join(parts)


def memory_text(memory: tuple[int, int] | None) -> str | None:
    if memory is None:
        return None
    used, limit = memory
    return f"device memory {format_bytes(used)} of {format_bytes(limit)} ({used / max(limit, 1):.0%})"


def cache_text(cache: tuple[int, int] | None) -> str | None:
    if cache is None:
        return None
    hits, misses = cache
    return f"compile cache {hits} hit{'' if hits == 1 else 's'}, {misses} miss{'' if misses == 1 else 'es'}"


def diagnosis_text(diagnosis: Diagnosis) -> str:
    """One diagnosis as a paragraph: title, evidence, places, fix."""
    places = f" At {'; '.join(diagnosis.places)}." if diagnosis.places else ""
    return f"{diagnosis.title}: {diagnosis.evidence}.{places} Fix: {diagnosis.fix}."


def format_value(value: float) -> str:
    return f"{value:.4g}"


def format_rate(per_second: float) -> str:
    if per_second >= 10:
        return f"{per_second:.0f}"
    if per_second >= 1:
        return f"{per_second:.1f}"
    return f"{per_second:.2g}"
