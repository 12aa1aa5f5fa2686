"""TorchTPU's own readings, parsed: its compilation-cache statistics, the cache misses in a TORCH_TRACE directory, its errors.

Pure logic, no torch or torch_tpu import: the functions take what torch_tpu
returns or wrote. The formats are those of torch-tpu 0.2.0, read from the
wheel and from the C++ sources of its repository (nothing here ran on a TPU):

- `torch.tpu._get_cache_stats()` (private: "not a stable API") returns a
  pybind `PerfStats` with `num_cache_reqs`, `num_cache_hits`,
  `num_compilations` (ints), `peak_compilation_host_memory_bytes` (int or
  None) and `per_entry_stats`: a list with, per compiled graph,
  `compilation_duration` (a `datetime.timedelta`, zero for a graph read from
  the tier-2 cache or whose compilation failed), `last_read`, `read_count`.
  Older builds (earlier commits of the repository) have no `num_compilations`.
- With TORCH_TRACE=<dir>, torch's structured log writes
  `<dir>/dedicated_log_torch_trace_[rank_N_]*.log`; for each batch torch_tpu
  compiled or looked up, one line

      V1201 12:00:00.000001 4242 torch_tpu/_internal/tracing/__init__.py:83] {"artifact": {"name": "torchtpu_eager_aten_graph", "encoding": "string", "op_name": "torchtpu_eager/kMm", "cache_hit": false, "compile_failed": false, "reason": "item()"}, "has_payload": "..."}

  followed by its payload, one tab-indented line per line: on a miss, the
  graph with the place of each op in the user's code:

      # Graph: 2 ops, 2 inputs, reason: item()
      %0: f32[8, 8] = input
      %1: f32[8, 8] = input
      %2: f32[8, 8] = mm.default(%0, %1)    # /tmp/cell.py:25 in forward

  (this layout was also written on CPU by torch 2.14.1 and torch_tpu 0.2.0's
  own tracing code). `reason` says why the batch ran: ".cpu()", "item()", "synchronize()",
  "autograd_post_backward", "repeated_op_heuristic", "debug_mode",
  "distributed_op", "compile_mode_execution" or "unknown".
- Without the CPU fallback (the default), an op TorchTPU lacks raises
  "operator 'aten::_upsample_bilinear2d_aa.out' is not implemented for TPU.
  Please file a feature request"; reading a value the TPU had no memory for
  raises "to_copy(): the TPU ran out of memory while awaiting the
  materialization of value float32[1048576, 1048576]:" followed by XLA's
  message, and a graph too big to compile fails in libtpu with "Ran out of
  memory in memory space hbm. Used 21.95G of 15.48G hbm."
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TypeGuard

TRACE_FILES = "dedicated_log_torch_trace_*.log"
GRAPH_ARTIFACT = "torchtpu_eager_aten_graph"  # the stablehlo artifact repeats its metadata: one is read per batch

_GRAPH_HEADER = re.compile(r"^# Graph: (?P<ops>\d+) ops, \d+ inputs, reason: ")
_OP_PLACE = re.compile(r"\)    # (?P<file>.+):(?P<line>\d+) in \S+$")
_MISSING_OP = re.compile(r"operator '(?P<op>[^']+)' is not implemented for TPU(?!\. Falling back)")
_TPU_OUT_OF_MEMORY = re.compile(r"the TPU ran out of memory while awaiting the materialization of value (?P<value>\S+\[[^\]]*\])")
_COMPILE_OUT_OF_MEMORY = re.compile(r"Ran out of memory in memory space hbm\.(?: Used (?P<used>\S+) of (?P<limit>\S+) hbm\.)?")

_MISSING_OP_FIX = (
    "move {op} out of the training step (into data preprocessing), or run it on the CPU explicitly "
    "(x.cpu(), the op, then .to('tpu')), or use an equivalent op TorchTPU has; see which ops torch_tpu implements "
    "(github.com/google-pytorch/torch_tpu) and ask there for {op}"
)
_OUT_OF_MEMORY_FIX = (
    "a smaller per-chip batch (per_device_train_batch_size, or the DataLoader's batch_size) with gradient accumulation "
    "to keep the effective batch; gradient checkpointing (model.gradient_checkpointing_enable()); bf16 "
    "(TrainingArguments(bf16=True), or model.to(torch.bfloat16)); or shard the model over the chips instead of a copy "
    "on each (FSDP2: torch.distributed.fsdp.fully_shard on each layer, then the model, in your cell)"
)


@dataclass(frozen=True, slots=True)
class CacheStats:
    """TorchTPU's compilation cache since the process started."""

    requests: int
    hits: int
    compilations: int
    compile_seconds: float
    longest_compile_seconds: float


@dataclass(frozen=True, slots=True)
class CacheMiss:
    """A batch whose graph was not in the compilation cache: why it ran, where, which graph."""

    graph: str  # the batch's name: "torchtpu_eager/" and its first op
    reason: str
    place: str | None  # "file:line" of the first op the trace ties to the user's code
    ops: int | None
    compile_failed: bool


@dataclass(frozen=True, slots=True)
class Advice:
    title: str
    evidence: str
    fix: str


def cache_stats(raw: object) -> CacheStats | None:
    """What `torch.tpu._get_cache_stats()` returned, or None when it is not the format above."""
    requests = getattr(raw, "num_cache_reqs", None)
    hits = getattr(raw, "num_cache_hits", None)
    entries = getattr(raw, "per_entry_stats", None)
    if not (_is_count(requests) and _is_count(hits) and isinstance(entries, list)) or hits > requests:
        return None
    durations = [duration for entry in entries if isinstance(duration := getattr(entry, "compilation_duration", None), timedelta)]
    if len(durations) < len(entries):
        return None
    seconds = [duration.total_seconds() for duration in durations if duration > timedelta(0)]
    compilations = getattr(raw, "num_compilations", len(seconds))  # older builds: the entries compiled here
    if not _is_count(compilations):
        return None
    return CacheStats(requests, hits, compilations, sum(seconds, start=0.0), max(seconds, default=0.0))


def cache_misses(trace_dir: Path) -> tuple[CacheMiss, ...]:
    """The cache misses torch_tpu traced into `trace_dir`, file by file; unreadable files and records not yet whole are skipped."""
    misses: list[CacheMiss] = []
    for path in sorted(trace_dir.glob(TRACE_FILES)):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        misses.extend(miss for metadata, payload in _records(text) if (miss := _miss(metadata, payload)) is not None)
    return tuple(misses)


class TraceFollower:
    """The cache misses torch_tpu traces into a directory, read as the files grow (at each heartbeat).

    Each file is read on from where the last look stopped, up to the start of
    its last record (which torch may still be writing); the run's last look
    reads to the end.
    """

    def __init__(self, trace_dir: Path) -> None:
        self.trace_dir = trace_dir
        self._offsets: dict[Path, int] = {}

    def new_misses(self, to_the_end: bool = False) -> tuple[CacheMiss, ...]:
        misses: list[CacheMiss] = []
        for path in sorted(self.trace_dir.glob(TRACE_FILES)):
            offset = self._offsets.get(path, 0)
            try:
                with path.open("rb") as file:
                    file.seek(offset)
                    data = file.read()
            except OSError:
                continue
            end = len(data) if to_the_end else data.rfind(b"\nV") + 1  # a record's first line starts with glog's "V"
            if end <= 0:
                continue
            self._offsets[path] = offset + end
            text = data[:end].decode("utf-8", errors="replace")
            misses.extend(miss for metadata, payload in _records(text) if (miss := _miss(metadata, payload)) is not None)
        return tuple(misses)


def advice_for_error(message: str) -> Advice | None:
    """What to change for TorchTPU's missing-op or out-of-memory errors; None for any other message."""
    if match := _MISSING_OP.search(message):
        op = match["op"]
        return Advice(f"{op} has no TPU kernel", _line_of(message, match), _MISSING_OP_FIX.format(op=op))
    if match := _TPU_OUT_OF_MEMORY.search(message):
        return Advice(f"The TPU ran out of memory (HBM) for a value {match['value']}", _line_of(message, match), _OUT_OF_MEMORY_FIX)
    if match := _COMPILE_OUT_OF_MEMORY.search(message):
        measured = f": used {match['used']} of {match['limit']}" if match["used"] else ""
        return Advice(f"A graph needs more TPU memory (HBM) than the chip has{measured}", _line_of(message, match), _OUT_OF_MEMORY_FIX)
    return None


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _records(text: str) -> Iterator[tuple[object, str]]:
    """Each whole record of a structured-log file: its metadata and its payload."""
    metadata: object = None
    payload: list[str] = []
    for line in text.split("\n"):  # as torch splits the payload: other line breaks are the payload's own
        if line.startswith("\t"):
            payload.append(line[1:])
            continue
        if metadata is not None:
            yield metadata, "\n".join(payload)
        metadata, payload = _metadata(line), []
    if metadata is not None:
        yield metadata, "\n".join(payload)


def _metadata(line: str) -> object:
    """The JSON after the glog prefix ("V1201 12:00:00.000001 4242 file.py:83] "); None for a cut or foreign line."""
    start = line.find("] {")
    if start < 0:
        return None
    try:
        return json.loads(line[start + 2 :])
    except json.JSONDecodeError:
        return None


def _miss(metadata: object, payload: str) -> CacheMiss | None:
    if not isinstance(metadata, dict) or metadata.get("has_payload") != _payload_hash(payload):
        return None  # not a record with a payload, or one torch is still writing
    artifact = metadata.get("artifact")
    if not isinstance(artifact, dict) or artifact.get("name") != GRAPH_ARTIFACT or artifact.get("cache_hit") is not False:
        return None
    graph, reason, failed = artifact.get("op_name"), artifact.get("reason"), artifact.get("compile_failed", False)
    if not (isinstance(graph, str) and isinstance(reason, str) and isinstance(failed, bool)):
        return None
    lines = payload.split("\n")
    header = _GRAPH_HEADER.match(lines[0])
    place = next((f"{match['file']}:{match['line']}" for line in lines if (match := _OP_PLACE.search(line))), None)
    return CacheMiss(graph, reason, place, int(header["ops"]) if header else None, failed)


def _payload_hash(payload: str) -> str:
    """What torch writes as "has_payload" (torch/_logging/_internal.py, trace_structured): the payload's MD5."""
    return hashlib.md5(payload.encode("utf-8"), usedforsecurity=False).hexdigest()


def _line_of(message: str, match: re.Match[str]) -> str:
    """The whole line of `message` the match is on: the error as the user saw it, without the traceback around it."""
    start = message.rfind("\n", 0, match.start()) + 1
    end = message.find("\n", match.end())
    return message[start : end if end >= 0 else len(message)].strip()
