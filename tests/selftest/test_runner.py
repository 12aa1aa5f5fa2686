"""The runner: each check within its limit, and a check for the other TPU stack skipped with why."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tpu_nb.runtime import detect
from tpu_nb.selftest.context import Context
from tpu_nb.selftest.runner import run_check
from tpu_nb.selftest.series import Check, CheckOutcome


def passing(context: Context) -> CheckOutcome:
    return CheckOutcome({"figure": 1})


def test_a_check_that_passes_keeps_its_figures(tmp_path: Path) -> None:
    result = run_check(Check(1, "ok", "a check that passes", 10, True, passing), Context(detect(), tmp_path))
    assert (result.status, result.figures, result.reason) == ("passed", {"figure": 1}, None)


def test_a_check_over_its_limit_fails_saying_so(tmp_path: Path) -> None:
    result = run_check(Check(1, "slow", "a slow check", 0.0, True, passing), Context(detect(), tmp_path))
    assert result.status == "failed" and result.reason is not None and "over its limit of 0s" in result.reason


def test_where_the_runtime_runs_torch_tpu_the_torch_xla_checks_skip_and_check_14_runs(tmp_path: Path) -> None:
    info = detect()
    on_torch_tpu = dataclasses.replace(info, stack=dataclasses.replace(info.stack, chosen="torch_tpu"))
    context = Context(on_torch_tpu, tmp_path)

    skipped = run_check(Check(1, "xla", "a torch_xla check", 10, True, passing), context)
    ran = run_check(Check(14, "tpu", "a TorchTPU check", 10, False, passing, needs_torch_xla=False), context)

    assert skipped.status == "skipped" and skipped.reason is not None and "runs torch_tpu, not torch_xla" in skipped.reason
    assert ran.status == "passed"
