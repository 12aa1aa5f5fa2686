"""What a selftest found: each check's result, and the report a user attaches to a bug report."""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Status = Literal["passed", "failed", "skipped"]
Figure = float | int | str


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    """What a check's `run` returns: passed with its figures, or skipped saying why (a failure raises `CheckFailed`)."""

    figures: dict[str, Figure] = field(default_factory=dict)
    skipped: str | None = None
    """Why the check cannot run here; None when it ran and passed."""


class CheckFailed(Exception):
    """A check found something wrong: the message says what, and the fix; `figures` what it measured before."""

    def __init__(self, message: str, figures: dict[str, Figure] | None = None) -> None:
        super().__init__(message)
        self.figures = dict(figures or {})


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's result as the table and the JSON show it."""

    number: int
    """Its place in the series, 1 to 14."""
    name: str
    """Its short name in the JSON, e.g. "dashboard"."""
    title: str
    """What it checks, in words, as the table shows it."""
    status: Status
    """"passed", "failed" or "skipped"."""
    figures: dict[str, Figure]
    """What it measured, by name (e.g. compilations_after_warm_up)."""
    seconds: float
    reason: str | None
    """Why it was skipped, or what failed and the fix; None when it passed."""
    traceback: str | None
    """The traceback of a failure that was not the check's own verdict (an error in a run, a bug)."""


@dataclass(frozen=True, slots=True)
class SelftestReport:
    """A whole selftest: when, on what runtime, every check's result, and tpu_nb's log."""

    started_at: float
    """When it started (Unix time)."""
    runtime: dict[str, Any]
    """What `%tpu_info` saw: platform, TPU, devices, versions, problems."""
    results: tuple[CheckResult, ...]
    """Every check's result, in order."""
    log: tuple[str, ...]
    """tpu_nb's log lines during the series."""

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        """The checks that failed."""
        return tuple(result for result in self.results if result.status == "failed")

    @property
    def seconds(self) -> float:
        """How long the checks took, in all."""
        return sum(result.seconds for result in self.results)

    def to_json(self) -> str:
        """The report as the file holds it: a summary by status, the runtime, every result, the log."""
        payload = {
            "tool": "tpu_nb selftest",
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(self.started_at)),
            "seconds": round(self.seconds, 2),
            "summary": {status: sum(result.status == status for result in self.results) for status in ("passed", "failed", "skipped")},
            "runtime": self.runtime,
            "results": [asdict(result) for result in self.results],
            "log": list(self.log),
        }
        return json.dumps(payload, indent=2, default=str)

    def file_name(self) -> str:
        """tpu_nb-selftest-<time>.json, the time it started."""
        return time.strftime("tpu_nb-selftest-%Y%m%d-%H%M%S.json", time.localtime(self.started_at))

    def write(self, directory: str | Path) -> Path:
        """Write the report as JSON into `directory` (made if missing); its path."""
        path = Path(directory) / self.file_name()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json(), encoding="utf-8")
        return path


def report_problem(directory: str | Path, named: str) -> str | None:
    """Why no report can be written into `directory` (made if missing), said as `named` ("--out DIR"); None if one can.

    Asked before the series runs: a directory found unwritable at its end lost minutes of checks' report.
    """
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as error:
        return f"{named}: cannot write the report there ({error.strerror or error}): give a directory you can write to."
    return None
