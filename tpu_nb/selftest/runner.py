"""Run the checks in order, each within its limit, and keep every result, failure and log line."""

from __future__ import annotations

import logging
import shutil
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from tpu_nb.kernel.run.leftovers import private_directory
from tpu_nb.runtime import detect
from tpu_nb.runtime.info import RuntimeInfo
from tpu_nb.selftest.context import Context
from tpu_nb.selftest.report import CheckFailed, CheckOutcome, CheckResult, SelftestReport, Status
from tpu_nb.selftest.series import CHECKS, Check

QUICK = sum(check.quick for check in CHECKS)
"""How many checks `--quick` runs: the first ones, which say whether tpu_nb runs here at all."""


class _LogLines(logging.Handler):
    """tpu_nb's own log records, as lines for the report."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.DEBUG)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"[log {record.levelname.lower()} {record.name}] {record.getMessage()}")


def run_checks(
    checks: Sequence[Check] = CHECKS, *, quick: bool = False, observe: Callable[[CheckResult], object] = lambda result: None
) -> SelftestReport:
    """Run `checks` (with `quick`, the quick ones) in order; `observe` gets each result as it comes."""
    started_at = time.time()
    info = detect()
    chosen = [check for check in checks if check.quick or not quick]
    results: list[CheckResult] = []
    # Named as a run's directories are: a selftest killed midway leaves it to the next run's cleanup.
    context = Context(info, private_directory("selftest"))
    handler = _LogLines(context.log)
    logger = logging.getLogger("tpu_nb")
    logger.addHandler(handler)
    try:
        for check in chosen:
            result = run_check(check, context)
            results.append(result)
            observe(result)
    finally:
        logger.removeHandler(handler)
        shutil.rmtree(context.scratch, ignore_errors=True)
    return SelftestReport(started_at, runtime_facts(info), tuple(results), tuple(context.log))


def run_check(check: Check, context: Context) -> CheckResult:
    """One check within its limit: passed, skipped with its reason, or failed with what and the fix (and a traceback if it raised)."""
    started = time.monotonic()
    context.deadline = started + check.limit_seconds
    figures: dict[str, Any] = {}
    reason = trace = None
    status: Status
    try:
        outcome = _not_on_this_stack(check, context) or check.run(context)
        figures, reason = outcome.figures, outcome.skipped
        status = "skipped" if outcome.skipped else "passed"
    except CheckFailed as failure:
        status, figures, reason = "failed", failure.figures, str(failure)
    except Exception as error:  # noqa: BLE001 - any error in a check is its failure, kept with its traceback for the report
        status, reason, trace = "failed", f"{type(error).__name__}: {error}", traceback.format_exc()
    seconds = time.monotonic() - started
    if status == "passed" and seconds > check.limit_seconds:
        status, reason = (
            "failed",
            f"took {seconds:.0f}s, over its limit of {check.limit_seconds:.0f}s: this device or machine is slower than it should be",
        )
    return CheckResult(check.number, check.name, check.title, status, figures, round(seconds, 2), reason, trace)


def _not_on_this_stack(check: Check, context: Context) -> CheckOutcome | None:
    """A skip for a torch_xla check where this runtime runs TorchTPU (None: it runs here); check 14 runs TorchTPU itself."""
    chosen = context.info.stack.chosen
    if not check.needs_torch_xla or chosen == "torch_xla":
        return None
    return CheckOutcome(skipped=f"this runtime runs {chosen}, not torch_xla, which this check's runs use (%tpu_info says why)")


def runtime_facts(info: RuntimeInfo) -> dict[str, Any]:
    """What the report says about this runtime: platform, accelerator, TPU, devices, versions, problems."""
    return {
        "label": info.label,
        "platform": info.platform.value,
        "accelerator": info.accelerator.value,
        "tpu": None if info.tpu is None else asdict(info.tpu),
        "pjrt_device": info.pjrt_device,
        "devices": info.devices,
        "workers": info.workers,
        "stack": info.stack.chosen,
        "versions": asdict(info.versions),
        "problems": [f"{problem.severity}: {problem.message} Fix: {problem.fix}" for problem in info.problems],
    }
