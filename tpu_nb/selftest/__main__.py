"""`python -m tpu_nb.selftest [--quick] [--out DIR]`: the selftest in a terminal (a TPU VM, CI); exit code 1 if a check failed."""

from __future__ import annotations

import argparse
import sys

from tpu_nb.selftest import run
from tpu_nb.selftest.report import report_problem
from tpu_nb.selftest.table import line, summary


def main(arguments: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpu_nb.selftest", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="Run the first few checks only (does tpu_nb run here at all).")
    parser.add_argument("--out", default=".", metavar="DIR", help="Where to write tpu_nb-selftest-<time>.json (default: here).")
    args = parser.parse_args(arguments)
    problem = report_problem(args.out, f"--out {args.out}")
    if problem is not None:
        parser.error(problem)  # before the series: its report would be lost at its end
    report = run(quick=args.quick, out=None, observe=lambda result: print(line(result), flush=True))
    print(f"{summary(report)}; report: {report.write(args.out)}")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
