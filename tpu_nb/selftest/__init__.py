"""`%tpu_selftest` and `python -m tpu_nb.selftest`: a fixed series of short checks on this machine's real device.

Modules: report (CheckResult, SelftestReport and its JSON), context (what
each check gets: limits, observed launches), workloads and planted (what the
workers run), raw_spawn (the plain xmp.spawn baseline), series (the checks,
in order), runner (runs them within each limit), table (the live table),
__main__ (the CLI). The checks call `tpu_nb.launch` and `tpu_nb.report`
through the package's face, as a user would: the one import of the face, which
stands above every floor (setup.cfg's floors contract), from below it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tpu_nb.selftest.report import CheckResult, SelftestReport


def run(quick: bool = False, out: str | Path | None = ".", observe: Callable[[CheckResult], object] | None = None) -> SelftestReport:
    """Run the selftest's checks (with `quick`, the first few) on this machine's device; the report, also written as JSON into `out`.

    Each check is a real run within its own time limit; one that cannot run
    here is skipped, saying why. `report.failed` lists what failed, each with
    what went wrong and the fix; attach the written `tpu_nb-selftest-*.json`
    to a bug report. `out=None` writes nothing; a directory no report can be written to is refused before any check
    runs (`LaunchRefused`).
    """
    from tpu_nb.kernel.endings.notebook_errors import refused
    from tpu_nb.selftest.report import report_problem
    from tpu_nb.selftest.runner import run_checks

    problem = None if out is None else report_problem(out, f"out={str(out)!r}")
    if problem is not None:
        raise refused(problem, by="tpu_nb's selftest")
    report = run_checks(quick=quick, observe=observe or (lambda result: None))
    if out is not None:
        report.write(out)
    return report
