"""The selftest's table in the dashboard's style: check, result pill, figures, seconds; HTML for a notebook, lines for a terminal."""

from __future__ import annotations

import html
from collections.abc import Sequence

from tpu_nb.kernel.progress.html_parts import pill
from tpu_nb.selftest.report import CheckResult, SelftestReport

STATUS_COLOURS = {"passed": "#2e7d32", "failed": "#c62828", "skipped": "#546e7a", "running": "#1565c0"}
_CELL = "padding:2px 10px;text-align:left;vertical-align:top"


def figures_text(result: CheckResult) -> str:
    return ", ".join(f"{name} {value}" for name, value in result.figures.items())


def line(result: CheckResult) -> str:
    """One result for a terminal: "  4 dashboard      passed   12.3s  ratio 0.98, ...", then the reason."""
    text = f"{result.number:>3} {result.name:<14} {result.status:<8} {result.seconds:>6.1f}s  {figures_text(result)}".rstrip()
    return text if result.reason is None else f"{text}\n      {result.reason}"


def summary(report: SelftestReport) -> str:
    counts = {status: sum(result.status == status for result in report.results) for status in ("passed", "failed", "skipped")}
    return f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped in {report.seconds:.0f}s"


def table_html(results: Sequence[CheckResult], running: str | None, label: str, footer: str = "") -> str:
    """The table so far; `running`: the title of the check under way, shown as the last row."""
    rows = []
    for result in results:
        reason = "" if result.reason is None else f'<div style="opacity:0.8">{html.escape(result.reason)}</div>'
        rows.append(
            f'<tr><td style="{_CELL}">{result.number}. {html.escape(result.title)}</td>'
            f'<td style="{_CELL}">{pill(result.status, STATUS_COLOURS[result.status])}</td>'
            f'<td style="{_CELL}">{html.escape(figures_text(result))}{reason}</td>'
            f'<td style="{_CELL};text-align:right">{result.seconds:.1f}s</td></tr>'
        )
    if running is not None:
        rows.append(
            f'<tr><td style="{_CELL}">{html.escape(running)}</td><td style="{_CELL}">{pill("running", STATUS_COLOURS["running"])}</td><td></td><td></td></tr>'
        )
    head = "".join(f'<th style="{_CELL}">{name}</th>' for name in ("check", "result", "figures", "seconds"))
    return (
        f'<div class="tpu-nb-selftest"><div style="font-weight:600">tpu_nb selftest · {html.escape(label)}</div>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        f"<div>{html.escape(footer)}</div></div>"
    )


class LiveTable:
    """The table in a notebook, updated in place under one display id as each result comes."""

    def __init__(self, titles: Sequence[str], label: str) -> None:
        from IPython import display as ipython_display

        self._titles = list(titles)
        self._label = label
        self._results: list[CheckResult] = []
        handle = ipython_display.display(self._bundle(table_html([], self._running(), label)), raw=True, display_id=True)
        assert handle is not None, "display(..., display_id=True) returns a handle"
        self._handle = handle

    @staticmethod
    def _bundle(markup: str) -> dict[str, str]:
        return {"text/html": markup, "text/plain": "tpu_nb selftest (its table shows in a notebook)"}

    def _running(self) -> str | None:
        done = len(self._results)
        return self._titles[done] if done < len(self._titles) else None

    def add(self, result: CheckResult) -> None:
        self._results.append(result)
        self._handle.update(self._bundle(table_html(self._results, self._running(), self._label)), raw=True)

    def finish(self, report: SelftestReport, path: str) -> None:
        self._handle.update(self._bundle(table_html(self._results, None, self._label, f"{summary(report)}. Report: {path}")), raw=True)
