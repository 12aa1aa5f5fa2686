"""Reading TorchTPU's cache statistics, TORCH_TRACE files and errors, from fixtures written to torch-tpu 0.2.0's formats."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from tpu_nb.workers.doctor.torch_tpu_readings import (
    Advice,
    CacheMiss,
    CacheStats,
    TraceFollower,
    advice_for_error,
    cache_misses,
    cache_stats,
)


def entry(seconds: float) -> SimpleNamespace:
    """One of `per_entry_stats`: pybind's `EntryStats` (the wheel's _device_ops_backend .so: compilation_duration ->
    datetime.timedelta, last_read -> datetime.datetime, read_count -> int; the repository's csrc/common/compilation_cache.h,
    `CacheEntryStats`: zero duration for an entry read from the tier-2 cache)."""
    return SimpleNamespace(compilation_duration=timedelta(seconds=seconds), last_read=datetime(2026, 12, 1), read_count=3)


def perf_stats(**fields: object) -> SimpleNamespace:
    """`torch.tpu._get_cache_stats()` as torch-tpu 0.2.0 returns it (PerfStats: num_cache_reqs, num_cache_hits,
    num_compilations, peak_compilation_host_memory_bytes, per_entry_stats, in that order in the .so's pybind init)."""
    defaults: dict[str, object] = {
        "num_cache_reqs": 40,
        "num_cache_hits": 37,
        "num_compilations": 3,
        "peak_compilation_host_memory_bytes": None,
        "per_entry_stats": [entry(2.5), entry(0.0), entry(0.5)],
    }
    return SimpleNamespace(**(defaults | fields))


def test_cache_stats_totals_the_compile_time_of_the_entries_compiled_here() -> None:
    assert cache_stats(perf_stats()) == CacheStats(requests=40, hits=37, compilations=3, compile_seconds=3.0, longest_compile_seconds=2.5)


def test_without_num_compilations_the_entries_compiled_here_are_counted() -> None:
    older = perf_stats()
    del older.num_compilations  # older builds (the repository's earlier compilation_cache.h has no such field)
    assert cache_stats(older) == CacheStats(40, 37, 2, 3.0, 2.5)


def test_an_empty_cache_has_no_compile_time() -> None:
    assert cache_stats(perf_stats(num_cache_reqs=0, num_cache_hits=0, num_compilations=0, per_entry_stats=[])) == CacheStats(
        0, 0, 0, 0.0, 0.0
    )


@pytest.mark.parametrize(
    "raw",
    [
        None,
        {"num_cache_reqs": 40, "num_cache_hits": 37, "per_entry_stats": []},  # a dict is not what the binding returns
        perf_stats(per_entry_stats=[SimpleNamespace(compilation_duration=2_500_000)]),  # microseconds, not a timedelta
        perf_stats(per_entry_stats=[SimpleNamespace(read_count=1)]),
        perf_stats(per_entry_stats=(entry(1.0),)),
        perf_stats(num_cache_hits=True),
        perf_stats(num_cache_reqs=-1),
        perf_stats(num_cache_hits=41),  # more hits than requests
        perf_stats(num_compilations="3"),
    ],
)
def test_cache_stats_in_another_format_are_not_read(raw: object) -> None:
    assert cache_stats(raw) is None


def record(metadata: object, payload: str) -> str:
    """One record as torch writes it under TORCH_TRACE (torch 2.14.1, torch/_logging/_internal.py: trace_structured adds
    "has_payload", the payload's MD5, at 1597-1599; TorchLogsFormatter writes the glog prefix, the metadata as JSON, then
    each payload line after "\\n\\t", at 1036-1042; the handler ends the record with "\\n")."""
    if isinstance(metadata, dict):
        metadata = metadata | {"has_payload": hashlib.md5(payload.encode(), usedforsecurity=False).hexdigest()}
    prefix = "V1201 12:00:00.000001 4242 torch_tpu/_internal/tracing/__init__.py:83]"
    return f"{prefix} {json.dumps(metadata)}" + "".join(f"\n\t{text}" for text in payload.split("\n")) + "\n"


def artifact(name: str, *, op_name: str, cache_hit: object, reason: str, compile_failed: bool = False) -> dict[str, object]:
    """The metadata torch_tpu gives each batch's artifacts (the wheel's torch_tpu/_internal/tracing/__init__.py:74-81)."""
    return {
        "artifact": {
            "name": name,
            "encoding": "string",
            "op_name": op_name,
            "cache_hit": cache_hit,
            "compile_failed": compile_failed,
            "reason": reason,
        }
    }


# A miss's graph as Traversal::ReadableString prints it (the repository's csrc/eager/traversal.{h,cc}: the header, the
# inputs, one row per op with "    # file:line in function" for its user frame); the wheel's glue .so holds those pieces.
MISSED_GRAPH = """# Graph: 3 ops, 2 inputs, reason: item()
%0: f32[8, 16] = input
%1: f32[16, 4] = input
%2: f32[8, 4] = mm.default(%0, %1)
%3: f32[8, 4] = relu.default(%2)    # /tmp/ipykernel_7/cell.py:12 in forward
%4: f32[] = sum.default(%3)    # /tmp/ipykernel_7/cell.py:14 in train_step
return %4"""

MISS = record(artifact("torchtpu_eager_aten_graph", op_name="torchtpu_eager/kMm", cache_hit=False, reason="item()"), MISSED_GRAPH)
MISS_STABLEHLO = record(
    artifact("torchtpu_eager_stablehlo", op_name="torchtpu_eager/kMm", cache_hit=False, reason="item()"),
    'module @graph {\n  func.func @main() loc(#loc1)\n}\n#loc1 = loc("/tmp/ipykernel_7/cell.py":12:0)',
)
HIT = record(artifact("torchtpu_eager_aten_graph", op_name="torchtpu_eager/kMm", cache_hit=True, reason="item()"), "")
CHROMIUM = record(
    {"chromium_event": {}},
    '{"name":"torchtpu_eager/kMm","ph":"X","ts":1,"dur":2,"cat":"torchtpu_eager","pid":4242,"tid":0,'
    '"args":{"cache_hit":false,"compile_failed":false,"reason":"item()"}}',
)
FAILED = record(
    artifact("torchtpu_eager_aten_graph", op_name="torchtpu_eager/kAdd", cache_hit=False, reason=".cpu()", compile_failed=True),
    "# Graph: 1 ops, 1 inputs, reason: .cpu()\n%0: bf16[4] = input\n%1: bf16[4] = add.Tensor(%0, %0)\nreturn %1",
)


def test_a_miss_gives_its_reason_place_and_graph(tmp_path: Path) -> None:
    (tmp_path / "dedicated_log_torch_trace_rank_0_ab12.log").write_text(CHROMIUM + MISS + MISS_STABLEHLO + HIT + FAILED)
    assert cache_misses(tmp_path) == (
        CacheMiss(graph="torchtpu_eager/kMm", reason="item()", place="/tmp/ipykernel_7/cell.py:12", ops=3, compile_failed=False),
        CacheMiss(graph="torchtpu_eager/kAdd", reason=".cpu()", place=None, ops=1, compile_failed=True),
    )


# Written by torch 2.14.1 and torch-tpu 0.2.0 themselves on a CPU host (TORCH_TRACE=<dir>, then
# torch_tpu._internal.tracing._emit_chromium and _emit_event_artifacts given a made-up miss and hit: the events a TPU
# would have drained from C++): the real prefix, JSON, "has_payload" and torch's own torch_version record.
CAPTURED = (
    'V1201 22:49:39.634000 31209 torch_tpu/_internal/tracing/__init__.py:54] {"chromium_event": {}, "has_payload": "9ba3ced6e97a82da41a813850149b1f0"}\n'
    '\t{"name":"torchtpu_eager/kMm","ph":"X","ts":1,"dur":2,"cat":"torchtpu_eager","pid":1,"tid":0,"args":{"cache_hit":false,"compile_failed":false,"reason":"item()"}}\n'
    'V1201 22:49:39.635000 31209 torch/_logging/_internal.py:1377] {"artifact": {"name": "torch_version", "encoding": "json"}, "has_payload": "18cd0098004821a63113ecf1011fa3c0"}\n'
    "\t{\n"
    '\t"pytorch_version": "2.14.1+cu130",\n'
    '\t"commit": "5c4886908584029761b579af026dcfb627c84070",\n'
    '\t"oss": true\n'
    "\t}\n"
    'V1201 22:49:39.635000 31209 torch_tpu/_internal/tracing/__init__.py:83] {"artifact": {"name": "torchtpu_eager_aten_graph", "encoding": "string", "op_name": "torchtpu_eager/kMm", "cache_hit": false, "compile_failed": false, "reason": "item()"}, "has_payload": "c29f30fc3416a6b176168182e79423e2"}\n'
    "\t# Graph: 2 ops, 2 inputs, reason: item()\n"
    "\t%0: f32[8, 16] = input\n"
    "\t%1: f32[16, 4] = input\n"
    "\t%2: f32[8, 4] = mm.default(%0, %1)    # /tmp/cell.py:12 in forward\n"
    "\treturn %2\n"
    'V1201 22:49:39.635000 31209 torch_tpu/_internal/tracing/__init__.py:83] {"artifact": {"name": "torchtpu_eager_stablehlo", "encoding": "string", "op_name": "torchtpu_eager/kMm", "cache_hit": false, "compile_failed": false, "reason": "item()"}, "has_payload": "aecbccc30c5aa03080dca40f2edd4128"}\n'
    "\tmodule {}\n"
    'V1201 22:49:39.635000 31209 torch_tpu/_internal/tracing/__init__.py:54] {"chromium_event": {}, "has_payload": "9ba3ced6e97a82da41a813850149b1f0"}\n'
    '\t{"name":"torchtpu_eager/kMm","ph":"X","ts":1,"dur":2,"cat":"torchtpu_eager","pid":1,"tid":0,"args":{"cache_hit":false,"compile_failed":false,"reason":"item()"}}\n'
    'V1201 22:49:39.635000 31209 torch_tpu/_internal/tracing/__init__.py:83] {"artifact": {"name": "torchtpu_eager_aten_graph", "encoding": "string", "op_name": "torchtpu_eager/kMm", "cache_hit": true, "compile_failed": false, "reason": "item()"}, "has_payload": "d41d8cd98f00b204e9800998ecf8427e"}\n'
    "\t\n"
    'V1201 22:49:39.636000 31209 torch_tpu/_internal/tracing/__init__.py:83] {"artifact": {"name": "torchtpu_eager_stablehlo", "encoding": "string", "op_name": "torchtpu_eager/kMm", "cache_hit": true, "compile_failed": false, "reason": "item()"}, "has_payload": "d41d8cd98f00b204e9800998ecf8427e"}\n'
    "\t\n"
)


def test_what_torch_and_torch_tpu_write_is_read(tmp_path: Path) -> None:
    (tmp_path / "dedicated_log_torch_trace_ezgtk86_.log").write_text(CAPTURED)
    assert cache_misses(tmp_path) == (CacheMiss("torchtpu_eager/kMm", "item()", "/tmp/cell.py:12", 2, False),)


def test_files_are_read_in_name_order_and_others_ignored(tmp_path: Path) -> None:
    (tmp_path / "dedicated_log_torch_trace_rank_1_zz.log").write_text(FAILED)
    (tmp_path / "dedicated_log_torch_trace_rank_0_aa.log").write_text(MISS)
    (tmp_path / "notes.log").write_text(MISS)
    assert [miss.graph for miss in cache_misses(tmp_path)] == ["torchtpu_eager/kMm", "torchtpu_eager/kAdd"]


def test_unreadable_files_and_cut_or_foreign_records_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "dedicated_log_torch_trace_dir.log").mkdir()  # matches the name, cannot be read
    being_written = MISS + FAILED[: FAILED.index("%1:")]  # torch still writing the last record's payload
    (tmp_path / "dedicated_log_torch_trace_a.log").write_text(being_written)
    cut_line = MISS + FAILED[: FAILED.index('"reason"')]
    (tmp_path / "dedicated_log_torch_trace_c.log").write_text(cut_line)
    foreign = "some other line\n" + record({"artifact": "not a dict"}, "") + record(["a", "list"], "")
    no_reason = record({"artifact": {"name": "torchtpu_eager_aten_graph", "op_name": "x", "cache_hit": False}}, "")
    not_a_bool = record(artifact("torchtpu_eager_aten_graph", op_name="x", cache_hit=0, reason="item()"), "")
    (tmp_path / "dedicated_log_torch_trace_b.log").write_bytes(b"\xff\xfe garbage\n" + (foreign + no_reason + not_a_bool).encode())
    assert [miss.graph for miss in cache_misses(tmp_path)] == ["torchtpu_eager/kMm", "torchtpu_eager/kMm"]
    (tmp_path / "dedicated_log_torch_trace_a.log").write_text(MISS + FAILED)  # the record is whole now
    assert [miss.graph for miss in cache_misses(tmp_path)] == ["torchtpu_eager/kMm", "torchtpu_eager/kAdd", "torchtpu_eager/kMm"]


def test_no_directory_or_no_trace_means_no_misses(tmp_path: Path) -> None:
    assert cache_misses(tmp_path / "missing") == ()
    assert cache_misses(tmp_path) == ()


def test_a_miss_without_a_graph_header_still_counts(tmp_path: Path) -> None:
    headless = record(artifact("torchtpu_eager_aten_graph", op_name="torchtpu_eager", cache_hit=False, reason="unknown"), "")
    (tmp_path / "dedicated_log_torch_trace_x.log").write_text(headless)
    assert cache_misses(tmp_path) == (CacheMiss("torchtpu_eager", "unknown", None, None, False),)


# Verbatim from a report of running transformers' tests on a v6e with torch-tpu (the message of the repository's
# TpuMissingOpFallback, csrc/eager/tpu_aten_kernels.cc; the same text is in the wheel's glue .so), inside a traceback.
MISSING_OP = """Traceback (most recent call last):
  File "/tmp/ipykernel_7/cell.py", line 3, in <module>
    F.interpolate(x.to("tpu"), size=(32, 32), mode="bilinear", antialias=True).cpu()
RuntimeError: operator 'aten::_upsample_bilinear2d_aa.out' is not implemented for TPU. Please file a feature request
"""


def test_a_missing_op_is_named_with_what_to_do() -> None:
    advice = advice_for_error(MISSING_OP)
    assert isinstance(advice, Advice)
    assert advice.title == "aten::_upsample_bilinear2d_aa.out has no TPU kernel"
    assert advice.evidence == (
        "RuntimeError: operator 'aten::_upsample_bilinear2d_aa.out' is not implemented for TPU. Please file a feature request"
    )
    assert "out of the training step" in advice.fix and "on the CPU explicitly" in advice.fix
    assert "github.com/google-pytorch/torch_tpu" in advice.fix and "aten::_upsample_bilinear2d_aa.out" in advice.fix


def test_the_cpu_fallback_warning_is_not_an_error() -> None:
    # With the CPU fallback on, the same op only logs this warning (TpuMissingOpFallback's other branch).
    assert advice_for_error("W1201 operator 'aten::cumsum.out' is not implemented for TPU. Falling back to CPU") is None


# torch_tpu's own out-of-memory error, as its test expects it (the repository's tests: test_mm_with_oom_result;
# csrc/ops/copy_from/tpu_to_cpu.cc, TranslateXlaTensorOomError), with an XLA message after the colon.
TPU_OUT_OF_MEMORY = (
    "RuntimeError: to_copy(): the TPU ran out of memory while awaiting the materialization of value float32[1048576, 1048576]:\n"
    "Error allocating device buffer: Attempting to allocate 4.00T. That was not possible. There are 31.2G free."
)
# libtpu's compile-time message, as public issues quote it (e.g. github.com/LargeWorldModel/LWM/issues/60).
COMPILE_OUT_OF_MEMORY = (
    "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 21.95G of 15.48G hbm.\n"
    " Exceeded hbm capacity by 6.47G."
)


def test_running_out_of_hbm_names_the_value_and_the_fixes() -> None:
    advice = advice_for_error(TPU_OUT_OF_MEMORY)
    assert advice is not None
    assert advice.title == "The TPU ran out of memory (HBM) for a value float32[1048576, 1048576]"
    assert advice.evidence.startswith("RuntimeError: to_copy(): the TPU ran out of memory") and "\n" not in advice.evidence
    for fix in ("smaller per-chip batch", "gradient_checkpointing_enable()", "bf16=True", "fully_shard"):
        assert fix in advice.fix


def test_a_graph_too_big_to_compile_gives_the_sizes() -> None:
    advice = advice_for_error(COMPILE_OUT_OF_MEMORY)
    assert advice is not None
    assert advice.title == "A graph needs more TPU memory (HBM) than the chip has: used 21.95G of 15.48G"
    assert advice.evidence.startswith("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error.")
    bare = advice_for_error("Ran out of memory in memory space hbm.")
    assert bare is not None and bare.title == "A graph needs more TPU memory (HBM) than the chip has"


@pytest.mark.parametrize(
    "message",
    [
        "",
        "RuntimeError: cannot access or re-initialize TPU in a forked subprocess. To use TPU with multiprocessing, "
        "you must use the 'spawn' start method",
        "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space vmem.",  # a kernel's scratch, not HBM
        "operator 'aten::foo' is not implemented for CPU",
    ],
)
def test_other_errors_get_no_advice(message: str) -> None:
    assert advice_for_error(message) is None


def test_a_follower_reads_each_miss_once_as_the_trace_grows_and_waits_for_a_record_being_written(tmp_path: Path) -> None:
    follower = TraceFollower(tmp_path)
    assert follower.new_misses() == ()  # no trace yet
    trace = tmp_path / "dedicated_log_torch_trace_rank_0_ab.log"
    trace.write_text(CHROMIUM + MISS + HIT)
    # The last record (the hit) may still be growing: read up to its start; the miss before it is whole.
    assert [miss.graph for miss in follower.new_misses()] == ["torchtpu_eager/kMm"]
    assert follower.new_misses() == ()  # said once
    with trace.open("a") as appending:
        appending.write(FAILED[: FAILED.index("%1:")])  # torch is writing the next one
    assert follower.new_misses() == ()
    with trace.open("a") as appending:
        appending.write(FAILED[FAILED.index("%1:") :])
    assert follower.new_misses() == ()  # the last record, still open to more lines
    assert [miss.graph for miss in follower.new_misses(to_the_end=True)] == ["torchtpu_eager/kAdd"]  # the run's end
