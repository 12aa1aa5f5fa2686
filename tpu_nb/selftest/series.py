"""The selftest's checks, in order: each a real run on this machine's device, with its own time limit.

A check returns its figures (passed) or a skip saying why it cannot run
here, and raises `CheckFailed` with what went wrong and the fix. Faults for
the tests are parameters (the function a rank runs, the system view that
shows who holds the TPU), never changes to tpu_nb.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tpu_nb
from tpu_nb.kernel.progress.throughput import ThroughputMeter, host_basis
from tpu_nb.runtime import RuntimeInfo
from tpu_nb.runtime.device_holders import tpu_device_holders
from tpu_nb.runtime.system import SystemView, installed_version
from tpu_nb.selftest import planted, workloads
from tpu_nb.selftest.context import Context
from tpu_nb.selftest.report import CheckFailed, CheckOutcome, Figure
from tpu_nb.wire.events import CheckpointSaved, ChipFigures, Diagnosis, Event, Heartbeat, Stopping, WorkerStarted
from tpu_nb.wire.stacks import StackReport

ATTACH = "run %tpu_selftest again; if it fails the same way, attach its JSON to a bug report"
MIN_OVERHEAD_RATIO = 0.5
"""Steps/s under tpu_nb over raw xmp.spawn below which the dashboard check fails (measured: 0.9-1.0)."""


@dataclass(frozen=True, slots=True)
class Check:
    number: int
    name: str
    title: str
    limit_seconds: float
    quick: bool
    """Part of `--quick` (the first few)."""
    run: Callable[[Context], CheckOutcome]
    needs_torch_xla: bool = True
    """Its runs use torch_xla: where the runtime runs TorchTPU instead, it is skipped, saying so."""


def skipped(reason: str) -> CheckOutcome:
    return CheckOutcome(skipped=reason)


def _ranks_run(results: list[dict[str, Any]], devices: int) -> None:
    """Every rank 0..devices-1 answered, and ran a program on its device."""
    ranks = sorted(result["rank"] for result in results)
    if ranks != list(range(devices)):
        raise CheckFailed(f"ranks {ranks} answered where {devices} devices were expected: {ATTACH}")
    idle = [result["rank"] for result in results if not result["ran"]]
    if idle:
        raise CheckFailed(f"rank(s) {idle} computed a wrong sum of ones on their device: the device is faulty; {ATTACH}")


def detection(context: Context, work: Callable[[], dict[str, Any]] = workloads.who_am_i) -> CheckOutcome:
    """What %tpu_info detects (chips, devices) is what the workers see."""
    info = context.info
    results, _ = context.launch(work, all_results=True)
    seen = {result["world_size"] for result in results} | {result["devices"] for result in results}
    figures: dict[str, Figure] = {
        "chips": info.tpu.chips if info.tpu else 0,
        "devices_detected": info.devices,
        "ranks_seen": len(results),
        "processes": len({result["pid"] for result in results}),
    }
    if seen != {info.devices}:
        raise CheckFailed(
            f"tpu_nb detected {info.devices} devices but the workers see {sorted(seen)}: --cores and the dashboard would be wrong "
            f"(set TPU_PROCESS_BOUNDS or CPU_NUM_DEVICES as %tpu_info shows, or unset them); {ATTACH}",
            figures,
        )
    _ranks_run(results, info.devices)
    return CheckOutcome(figures)


def every_core(context: Context, work: Callable[[], dict[str, Any]] = workloads.who_am_i) -> CheckOutcome:
    """Every rank runs a program; the launch latency of a first and a following run."""
    figures: dict[str, Figure] = {}
    for label in ("first_run_s", "next_run_s"):
        started = time.monotonic()
        try:
            results, _ = context.launch(work, all_results=True)
        except tpu_nb.TrainingTimedOut as error:
            raise CheckFailed(
                f"a rank never reported: the run was still going when the check's limit ran out ({error}). A worker is stuck "
                "before its first program: run %tpu_info (problems, with their fixes) and %tpu_release if another process "
                f"holds the TPU, then {ATTACH}",
                figures,
            ) from None
        figures[label] = round(time.monotonic() - started, 2)
        _ranks_run(results, context.info.devices)
    return CheckOutcome(figures)


def collectives(context: Context) -> CheckOutcome:
    """An all_reduce sums correctly; after xm.optimizer_step every rank holds the same weights."""
    results, _ = context.launch(workloads.collectives, all_results=True)
    figures: dict[str, Figure] = {"ranks": len(results), "all_reduce_sum": results[0]["sum"]}
    wrong = [rank for rank, result in enumerate(results) if result["sum"] != result["expected"]]
    if wrong:
        raise CheckFailed(
            f"all_reduce of rank + 1 gave {results[0]['sum']} on ranks {wrong}, not {results[0]['expected']}: {ATTACH}", figures
        )
    reference = results[0]["weights"]
    spread = max(float((result["weights"] - reference).abs().max()) for result in results)
    figures["weights_max_difference"] = spread
    if spread > 1e-6:
        raise CheckFailed(
            f"after xm.optimizer_step the ranks' weights differ by up to {spread:g}: gradients are not averaged across cores; {ATTACH}",
            figures,
        )
    return CheckOutcome(figures)


def dashboard(context: Context, steps: int = 20, warm_up: int = 3) -> CheckOutcome:
    """Steps/s of a small BERT under tpu_nb vs raw xmp.spawn, tpu_nb's CPU time per step, no compilation after warm-up;
    its tokens/s and MFU as the dashboard measures them."""
    ours, recorder = context.launch(workloads.bert_steps, steps, warm_up)
    raw = _raw_spawn(context, steps, warm_up)
    ratio = ours["steps_per_second"] / raw["steps_per_second"]
    figures: dict[str, Figure] = {
        "tpu_nb_steps_per_s": round(ours["steps_per_second"], 2),
        "raw_xmp_steps_per_s": round(raw["steps_per_second"], 2),
        "ratio": round(ratio, 3),
        "report_cpu_ms_per_step": round(ours["report_cpu_ms_per_step"], 3),
        "compilations_after_warm_up": int(ours["compilations_after_warm_up"]),
        **speed_figures(context.info, context.info.devices, recorder.events, ours["flops_per_token"]),
    }
    if ours["compilations_after_warm_up"]:
        raise CheckFailed(
            f"{int(ours['compilations_after_warm_up'])} compilations after warm-up under tpu_nb (none under raw xmp.spawn: "
            f"{int(raw['compilations_after_warm_up'])}): tpu_nb adds work to the step's graph; {ATTACH}",
            figures,
        )
    if ratio < MIN_OVERHEAD_RATIO:
        raise CheckFailed(
            f"the loop ran at {ratio:.2f} times its speed under raw xmp.spawn: something else may be using this machine's CPU "
            f"(check with top), or tpu_nb slows the step; {ATTACH}",
            figures,
        )
    return CheckOutcome(figures)


def speed_figures(info: RuntimeInfo, devices: int, events: Sequence[Event], flops_per_token: float) -> dict[str, Figure]:
    """A run's tokens/s and MFU as its dashboard measures them, from its events; where there is no MFU, why."""
    meter = ThroughputMeter(host_basis(info, devices, flops_per_token))
    for event in events:
        meter.on_event(event)
    speed = meter.overall()
    return {
        "tokens_per_s": "none counted" if speed.tokens_per_second is None else round(speed.tokens_per_second, 1),
        "mfu": (speed.no_mfu or "none") if speed.mfu is None else round(speed.mfu, 4),
    }


def _raw_spawn(context: Context, steps: int, warm_up: int) -> dict[str, float]:
    """The same loop in a process of its own under plain xmp.spawn (never in this process: it would start XLA here)."""
    out = context.scratch / "raw_spawn.json"
    environment = {name: value for name, value in os.environ.items() if name not in context.info.topology_vars}
    command = [sys.executable, "-m", "tpu_nb.selftest.raw_spawn", str(steps), str(warm_up), str(out)]
    try:
        done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=context.remaining(), check=False)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"raw xmp.spawn of the same loop did not end within the check's limit: {ATTACH}") from None
    context.write("stderr", done.stderr[-4000:])
    if done.returncode != 0 or not out.exists():
        raise CheckFailed(f"raw xmp.spawn of the same loop failed (exit code {done.returncode}): {done.stderr.strip()[-600:]}")
    figures: dict[str, float] = json.loads(out.read_text(encoding="utf-8"))
    return figures


def compile_cache(context: Context) -> CheckOutcome:
    """A second run of the same program loads its compiled programs from the cache."""
    if context.info.tpu is None:
        return skipped("XLA:CPU cannot load cached programs (it stores HLO, not machine code): a TPU's cache is checked on a TPU")
    # Not run here (no TPU): the hits are libtpu's persistent-cache counters, carried by the workers' heartbeats.
    directory = context.scratch / "compile_cache"
    figures: dict[str, Figure] = {}
    for label in ("first", "second"):
        started = time.monotonic()
        _, recorder = context.launch(workloads.bert_steps, 5, 1, compile_cache=str(directory))
        beats = recorder.of(Heartbeat)
        figures[f"{label}_run_s"] = round(time.monotonic() - started, 2)
        figures[f"{label}_compilations"] = max((beat.compile_count for beat in beats), default=0)
        figures[f"{label}_compile_s"] = round(max((beat.compile_seconds for beat in beats), default=0.0), 2)
        figures[f"{label}_cache_hits"] = max((beat.cache[0] for beat in beats if beat.cache), default=0)
    figures["seconds_saved"] = round(float(figures["first_compile_s"]) - float(figures["second_compile_s"]), 2)
    if not figures["second_cache_hits"]:
        raise CheckFailed(f"the second run of the same program had no hits in the compile cache at {directory}: {ATTACH}", figures)
    return CheckOutcome(figures)


def doctor(context: Context) -> CheckOutcome:
    """The XLA doctor finds a planted per-step .item() and a planted shape change, each at its line."""
    figures: dict[str, Figure] = {}
    for label, loop, steps, title, marker in (
        ("host_read", planted.host_read_loop, 60, "Host syncs", "a host read"),
        ("shape_change", planted.shape_change_loop, 40, "Compiled once per", "the batch's shape"),
    ):
        _, recorder = context.launch(loop, steps)
        place = planted.place_of(marker)
        found = [diagnosis for diagnosis in recorder.of(Diagnosis) if diagnosis.title.startswith(title)]
        figures[f"{label}_findings"] = len(found)
        if not any(place in where for diagnosis in found for where in diagnosis.places):
            named = "; ".join(f"{diagnosis.title}: {', '.join(diagnosis.places)}" for diagnosis in recorder.of(Diagnosis)) or "nothing"
            raise CheckFailed(
                f"the doctor did not name the planted {label.replace('_', ' ')} at {place} (it named {named}): {ATTACH}", figures
            )
        figures[f"{label}_at_line"] = planted.line_of(marker)
    return CheckOutcome(figures)


def stopping(context: Context, system: SystemView | None = None, after_steps: int = 3) -> CheckOutcome:
    """A graceful stop at an agreed step returns the model; a hard stop frees the device, and the next run starts.

    `system`: where to look for processes holding the TPU after the hard stop (this machine's, by default).
    """
    figures: dict[str, Figure] = {}
    with context.started(workloads.stoppable_loop) as (handle, recorder):
        context.wait_for(lambda: any((row.get("step") or 0) >= after_steps for row in handle.metrics), f"step {after_steps}", ATTACH)
        asked = time.monotonic()
        handle.stop()
        result = handle.wait(context.remaining())
    figures["graceful_stop_s"] = round(time.monotonic() - asked, 2)
    agreed = {event.step for event in recorder.of(Stopping)}
    figures["stopped_at_step"] = result["stopped_at"]
    if handle.status != "stopped" or agreed != {result["stopped_at"]}:
        raise CheckFailed(
            f"the graceful stop ended as {handle.status!r}, at steps {sorted(agreed)} agreed and {result['stopped_at']} reached: {ATTACH}"
        )
    if abs(workloads.checksum(result["model"].state_dict().values()) - result["checksum"]) > 1e-9:
        raise CheckFailed(f"the model came back from the graceful stop with other weights than the worker's: {ATTACH}", figures)
    with context.started(workloads.spin) as (handle, spinning):
        context.wait_for(lambda: bool(spinning.of(WorkerStarted)), "the run's start", ATTACH)
        asked = time.monotonic()
        handle.kill()
        figures["hard_stop_s"] = round(time.monotonic() - asked, 2)
    holders = tpu_device_holders(system or SystemView.current())
    if holders:
        pids = " ".join(str(holder.pid) for holder in holders)
        raise CheckFailed(
            f"after the hard stop the TPU is held by {'; '.join(holder.summary for holder in holders)}: run %tpu_release {pids} to end "
            "it (or restart the runtime), then run %tpu_selftest again",
            figures,
        )
    started = time.monotonic()
    context.launch(workloads.who_am_i)
    figures["next_run_s"] = round(time.monotonic() - started, 2)
    return CheckOutcome(figures)


def results(context: Context, megabytes: int = 1024) -> CheckOutcome:
    """A model's weights and a 1 GB tensor come back whole (through disk where /dev/shm is small)."""
    started = time.monotonic()
    value, _ = context.launch(workloads.big_result, megabytes)
    figures: dict[str, Figure] = {
        "tensor_mb": megabytes,
        "shm_free_mb": round(shutil.disk_usage("/dev/shm").free / 2**20) if Path("/dev/shm").exists() else 0,
        "seconds": round(time.monotonic() - started, 2),
    }
    if abs(workloads.checksum(value["model"].state_dict().values()) - value["model_checksum"]) > 1e-6:
        raise CheckFailed(f"the model's weights came back different from the worker's: {ATTACH}", figures)
    tensor = value.pop("tensor")
    if tensor.numel() * tensor.element_size() != megabytes * 2**20 or abs(workloads.checksum([tensor]) - value["tensor_checksum"]) > 1e-3:
        raise CheckFailed(f"the {megabytes} MB tensor came back different from the worker's: {ATTACH}", figures)
    return CheckOutcome(figures)


def checkpoints(context: Context, steps: int = 6) -> CheckOutcome:
    """Checkpoints are saved and verified, and a resumed run ends with the weights of an unbroken one."""
    unbroken, _ = context.launch(workloads.checkpointed_loop, steps)
    directory = context.scratch / "checkpoints"
    first, saving = context.launch(workloads.checkpointed_loop, steps // 2, checkpoint=str(directory), every=f"{steps}steps")
    resumed, _ = context.launch(workloads.checkpointed_loop, steps, checkpoint=str(directory), resume=True)
    saved = saving.of(CheckpointSaved)
    figures: dict[str, Figure] = {
        "saved": len(saved),
        "verified": sum(event.verified for event in saved),
        "save_s": round(max((event.seconds for event in saved), default=0.0), 3),
        "resumed_from_step": resumed["started_at"],
    }
    if not saved or not all(event.verified for event in saved):
        problems = "; ".join(str(event.problem) for event in saved if not event.verified) or "none was saved"
        raise CheckFailed(f"the checkpoint at step {steps // 2} in {directory} was not verified ({problems}): {ATTACH}", figures)
    if resumed["started_at"] != steps // 2:
        raise CheckFailed(f"the resumed run started at step {resumed['started_at']}, not {steps // 2}: {ATTACH}", figures)
    difference = float((resumed["weights"] - unbroken["weights"]).abs().max())
    figures["max_difference"] = difference
    if difference > 1e-5:
        raise CheckFailed(f"the resumed run's weights differ from an unbroken run's by up to {difference:g}: {ATTACH}", figures)
    del first
    return CheckOutcome(figures)


def watchdog(context: Context, threshold: float = 3.0, stall_step: int = 5) -> CheckOutcome:
    """The watchdog names a stall planted on one rank at its line."""
    stall_rank = context.info.devices - 1
    with context.started(planted.stalled_loop, stall_rank, stall_step, watchdog=f"{threshold:g}s") as (_, recorder):
        seconds = context.wait_for(lambda: bool(recorder.of(StackReport)), "the watchdog's report", ATTACH)
    report = recorder.of(StackReport)[0]
    place = planted.place_of("one rank stalls")
    figures: dict[str, Figure] = {"threshold_s": threshold, "report_after_s": round(seconds, 2), "stalled_rank": stall_rank}
    stalled = [where for where in (rank.where for rank in report.ranks) if where and place in where]
    if not stalled:
        raise CheckFailed(f"the watchdog's report does not name the planted stall at {place}:\n{report}\n{ATTACH}", figures)
    return CheckOutcome(figures)


_DUTY = re.compile(r"TensorCore (\d+)%")
_HBM = re.compile(r"HBM (\d+(?:\.\d+)?)")


def chip_figures(context: Context) -> CheckOutcome:
    """tpu-info's figures during a run: duty cycle above zero, HBM in use."""
    if context.info.tpu is None:
        return skipped("no TPU here: the duty cycle and HBM come from libtpu's metrics service on a TPU")
    if installed_version("tpu-info") is None:
        return skipped("tpu-info is not installed (pip install tpu-info): the dashboard shows no chip figures without it")
    # Not run here (no TPU): the figures are what the worker rows show, read from libtpu by tpu-info.
    _, recorder = context.launch(workloads.bert_steps, 300, 5)
    texts = [event.text for event in recorder.of(ChipFigures)]
    duty = max((int(match.group(1)) for text in texts for match in _DUTY.finditer(text)), default=0)
    hbm = max((float(match.group(1)) for text in texts for match in _HBM.finditer(text)), default=0.0)
    figures: dict[str, Figure] = {"readings": len(texts), "duty_cycle_max_percent": duty, "hbm_gib_max": hbm}
    if not duty or not hbm:
        said = texts[-1] if texts else "no reading"
        raise CheckFailed(f"tpu-info gave no duty cycle or HBM during a run ({said}): check `tpu-info` in a terminal; {ATTACH}", figures)
    return CheckOutcome(figures)


def bf16(context: Context) -> CheckOutcome:
    """A training step in bfloat16 gives a finite loss."""
    value, _ = context.launch(workloads.bf16_step)
    figures: dict[str, Figure] = {"loss": round(value["loss"], 4), "dtype": value["dtype"]}
    if not math.isfinite(value["loss"]) or value["dtype"] != "torch.bfloat16":
        raise CheckFailed(f"a bfloat16 step gave a loss of {value['loss']} ({value['dtype']}): {ATTACH}", figures)
    return CheckOutcome(figures)


def spmd(context: Context) -> CheckOutcome:
    """Under --spmd, each device holds 1/N of the parameters' bytes."""
    if context.info.devices < 2:
        return skipped("one device: nothing to shard")
    value, _ = context.launch(workloads.sharded_bytes, spmd=True)
    figures: dict[str, Figure] = {
        "devices": value["devices"],
        "bytes_per_device": value["per_device"],
        "bytes_in_all": value["whole"],
        "fraction": round(value["per_device"] / value["whole"], 4),
    }
    if value["per_device"] > value["split"]:
        raise CheckFailed(
            f"each device holds {value['per_device']} parameter bytes where a split into {value['devices']} gives {value['split']} "
            f"(of {value['whole']}): --spmd does not shard the model; {ATTACH}",
            figures,
        )
    return CheckOutcome(figures)


def torch_tpu(context: Context) -> CheckOutcome:
    """On TorchTPU: the same minimal run in each mode (eager, fused, compile)."""
    if installed_version("torch-tpu") is None:
        return skipped("TorchTPU is not installed (it needs torch 2.11 or newer and a TPU: docs/guides/torch-tpu.md)")
    if context.info.tpu is None:
        return skipped("no TPU here: TorchTPU has no CPU device")
    # Not run here (no TPU): each mode is a run of its own, a process per chip.
    figures: dict[str, Figure] = {}
    for mode in ("eager", "fused", "compile"):
        started = time.monotonic()
        loss, _ = context.launch(workloads.torch_tpu_step, stack="torch_tpu", mode=mode)
        figures[f"{mode}_s"] = round(time.monotonic() - started, 2)
        if not math.isfinite(loss):
            raise CheckFailed(f"a TorchTPU step in {mode} mode gave a loss of {loss}: {ATTACH}", figures)
    return CheckOutcome(figures)


CHECKS: tuple[Check, ...] = (
    Check(1, "detection", "detection agrees with the device", 60, True, detection),
    Check(2, "every_core", "every core runs; launch latency", 60, True, every_core),
    Check(3, "collectives", "all_reduce and optimizer_step", 60, True, collectives),
    Check(4, "dashboard", "tpu_nb's overhead on a small BERT", 120, False, dashboard),
    Check(5, "compile_cache", "a second run hits the compile cache", 120, False, compile_cache),
    Check(6, "doctor", "the doctor finds planted faults", 90, False, doctor),
    Check(7, "stopping", "graceful and hard stops", 60, False, stopping),
    Check(8, "results", "a model and a 1 GB tensor come back", 90, False, results),
    Check(9, "checkpoints", "save, verify, resume", 90, False, checkpoints),
    Check(10, "watchdog", "the watchdog names a planted stall", 60, False, watchdog),
    Check(11, "chip_figures", "tpu-info: duty cycle and HBM", 60, False, chip_figures),
    Check(12, "bf16", "a bfloat16 step", 60, False, bf16),
    Check(13, "spmd", "--spmd: 1/N of the parameters per device", 60, False, spmd),
    Check(14, "torch_tpu", "TorchTPU in each mode", 120, False, torch_tpu, needs_torch_xla=False),
)
