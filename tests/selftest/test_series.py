"""Single checks with planted faults, on XLA:CPU: each fails with a message that names the fix; the speed figures a run's
events give the report."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from support.device_holders import fake_tpu_in
from support.platforms import MakeSystem
from support.processes import descendants, interrupt_when, wait_until

from tpu_nb.runtime import detect
from tpu_nb.selftest import series
from tpu_nb.selftest.context import Context
from tpu_nb.selftest.report import CheckFailed
from tpu_nb.selftest.runner import run_check
from tpu_nb.selftest.series import CHECKS, speed_figures
from tpu_nb.wire.events import Counted, Event, Progress


@pytest.fixture
def context(tmp_path: Path) -> Context:
    return Context(detect(), tmp_path)


def never_reports() -> dict[str, Any]:
    time.sleep(3600)
    return {}


def test_a_rank_that_never_reports_fails_its_check_naming_the_fix(context: Context) -> None:
    context.deadline = time.monotonic() + 8

    with pytest.raises(CheckFailed) as failure:
        series.every_core(context, work=never_reports)

    assert "a rank never reported" in str(failure.value)
    assert "%tpu_info" in str(failure.value) and "%tpu_release" in str(failure.value)


def test_a_device_held_by_another_process_after_the_hard_stop_names_tpu_release(context: Context, tmp_path: Path) -> None:
    context.deadline = time.monotonic() + 60
    with fake_tpu_in(tmp_path) as tpu:
        holder = tpu.hold_as_orphan("accel0")

        with pytest.raises(CheckFailed) as failure:
            series.stopping(context, system=tpu.view())

    assert f"%tpu_release {holder}" in str(failure.value)
    assert failure.value.figures["stopped_at_step"] >= 3  # the graceful stop before it passed


def test_a_stopping_check_cut_short_leaves_no_run_behind(context: Context) -> None:
    # Interrupted while it waits for a step its run never reaches: its run would hold the device until its timeout.
    context.deadline = time.monotonic() + 120
    before = set(descendants(os.getpid()))
    interrupt_when(lambda: len(set(descendants(os.getpid())) - before) >= 2, (1.0,))  # once the supervisor and a worker run

    with pytest.raises(KeyboardInterrupt):
        series.stopping(context, after_steps=10**9)

    assert wait_until(lambda: not set(descendants(os.getpid())) - before, 10), set(descendants(os.getpid())) - before


def test_an_error_inside_a_check_is_its_failure_with_the_traceback(context: Context) -> None:
    def broken(context: Context) -> series.CheckOutcome:
        raise ValueError("planted")

    result = run_check(series.Check(99, "broken", "a broken check", 10, False, broken), context)

    assert result.status == "failed" and result.reason == "ValueError: planted"
    assert result.traceback is not None and 'raise ValueError("planted")' in result.traceback


def test_what_cannot_run_on_xla_cpu_is_skipped_with_its_reason(context: Context) -> None:
    reasons = {
        check.name: run_check(check, context) for check in CHECKS if check.name in ("compile_cache", "chip_figures", "torch_tpu", "spmd")
    }

    assert all(result.status == "skipped" for result in reasons.values())
    assert reasons["compile_cache"].reason is not None and "XLA:CPU cannot load cached programs" in reasons["compile_cache"].reason
    assert reasons["spmd"].reason == "one device: nothing to shard"


def test_on_four_devices_each_holds_a_quarter_of_the_parameters_under_spmd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Check 13 where there is more than one device (XLA:CPU's virtual devices stand in for a host's chips)."""
    monkeypatch.setenv("CPU_NUM_DEVICES", "4")
    context = Context(detect(), tmp_path)
    assert context.info.devices == 4
    context.deadline = time.monotonic() + 120

    sharded = series.spmd(context)

    assert sharded.skipped is None and sharded.figures["devices"] == 4
    assert float(sharded.figures["fraction"]) < 0.3  # the matrices split four ways; a few small vectors whole


def test_the_reports_speed_figures_are_the_dashboards_with_why_there_is_no_mfu(make_system: MakeSystem) -> None:
    events: list[Event] = [Progress(0, step, {}, phase="train", counted=Counted(step * 0.5, step * 256, step * 8)) for step in range(1, 21)]
    kaggle = speed_figures(detect(make_system("kaggle_v5e_8")), 8, events, 1.0e9)
    assert kaggle == {"tokens_per_s": 512.0, "mfu": round(512 * 1.0e9 / (8 * 197e12), 4)}
    cpu = speed_figures(detect(make_system("cpu_laptop")), 1, events, 1.0e9)
    assert cpu == {"tokens_per_s": 512.0, "mfu": "no MFU off-TPU: XLA:CPU has no chip peak to measure it against"}
    assert speed_figures(detect(make_system("cpu_laptop")), 1, [], 1.0e9) == {"tokens_per_s": "none counted", "mfu": "none"}
