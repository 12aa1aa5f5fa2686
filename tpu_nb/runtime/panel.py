"""Render a RuntimeInfo as HTML for notebooks and as plain text for terminals.

Pure string building: no IPython import, so the panel also works (as text)
in a worker, a terminal or an nbconvert text export.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Protocol

from tpu_nb.runtime.device_holders import DeviceHolder, describe_age
from tpu_nb.runtime.info import Problem, RuntimeInfo, Severity, StackStatus

_SEVERITY_COLOURS: dict[Severity, str] = {
    "error": "#c62828",
    "warning": "#b26a00",
    "info": "#455a64",
}
_CELL_STYLE = "text-align:left;padding:1px 12px 1px 0"
_HOLDER_COLUMNS = ("pid", "command", "device files", "running for", "user", "from")


class _TextPrinter(Protocol):
    """The part of IPython's pretty printer that `_repr_pretty_` uses."""

    def text(self, obj: str) -> None: ...


@dataclass(frozen=True, slots=True, repr=False)
class RuntimePanel:
    """What `%tpu_info` displays: the runtime, the launch plan and any problems."""

    info: RuntimeInfo

    def _repr_html_(self) -> str:
        rows = "".join(
            f'<tr><th style="{_CELL_STYLE}">{html.escape(label)}</th><td style="{_CELL_STYLE}">{html.escape(value)}</td></tr>'
            for label, value in self._rows()
        )
        problems = "".join(_problem_html(problem) for problem in self.info.problems)
        return (
            '<div class="tpu-nb-runtime">'
            f'<table style="border-collapse:collapse">{rows}</table>'
            f"<p><strong>{html.escape(self._status())}</strong></p>"
            f'<ul style="list-style:none;padding-left:0">{problems}</ul>'
            f"{_holders_html(self.info.tpu_holders)}"
            "</div>"
        )

    def __repr__(self) -> str:
        rows = self._rows()
        width = max(len(label) for label, _ in rows)
        lines = ["tpu_nb runtime"]
        lines += [f"  {label.ljust(width)}  {value}" for label, value in rows]
        lines.append(self._status())
        for problem in self.info.problems:
            lines.append(f"{problem.severity.upper()} [{problem.code}] {problem.message}")
            lines.append(f"  fix: {problem.fix}")
        if self.info.tpu_holders:
            lines.append("Processes holding the TPU:")
            lines += [f"  {holder.summary}" for holder in self.info.tpu_holders]
        return "\n".join(lines)

    def _repr_pretty_(self, printer: _TextPrinter, cycle: bool) -> None:
        printer.text(repr(self))

    def _rows(self) -> list[tuple[str, str]]:
        info = self.info
        if info.stack.chosen == "torch_tpu":
            devices = [("Workers", f"{info.workers} (a process per chip)")]
        else:
            devices = [
                ("XLA devices", str(info.devices)),
                ("Workers", f"{info.workers} ({_count(info.devices_per_worker, 'device')} each)"),
                ("PJRT device", info.pjrt_device),
            ]
        return [
            ("Platform", info.platform.label),
            ("Accelerator", self._accelerator()),
            *devices,
            ("TPU stack", f"{info.stack.used.label}: {info.stack.why}"),
            *(("Other stack", _other_stack(stack)) for stack in info.stack.stacks if stack.name != info.stack.chosen),
            ("Versions", self._versions()),
            ("Install", info.install_command),
        ]

    def _accelerator(self) -> str:
        tpu = self.info.tpu
        if tpu:
            accelerator_type = f" ({tpu.accelerator_type})" if tpu.accelerator_type else ""
            return f"TPU {tpu.generation}{accelerator_type}, {_count(tpu.chips, 'chip')}"
        if self.info.gpu_count:
            return f"{_count(self.info.gpu_count, 'NVIDIA GPU')} (not used by tpu_nb)"
        return "CPU only"

    def _versions(self) -> str:
        versions = self.info.versions
        packages = {
            "Python": versions.python,
            "torch": versions.torch,
            "torch_xla": versions.torch_xla,
            "libtpu": versions.libtpu,
            "transformers": versions.transformers,
        }
        if versions.torch_tpu:
            packages["torch_tpu"] = versions.torch_tpu
        return ", ".join(f"{name} {version or 'not installed'}" for name, version in packages.items())

    def _status(self) -> str:
        info = self.info
        if info.can_launch:
            on = "TorchTPU" if info.stack.chosen == "torch_tpu" else info.pjrt_device
            return f"Ready: %%tpu_train will start {_count(info.workers, 'worker')} on {on}."
        return f"Not ready: fix {_count(len(info.errors), 'error')} before %%tpu_train."


def _other_stack(stack: StackStatus) -> str:
    """The stack %%tpu_train does not use: that it would work (--stack picks it), or what it lacks and the fix."""
    if stack.works:
        return f"{stack.label} works here too (--stack {stack.name})"
    fix = f"; {stack.fix}" if stack.fix else ""
    return f"{stack.label}: {stack.missing}{fix}"


def _problem_html(problem: Problem) -> str:
    colour = _SEVERITY_COLOURS[problem.severity]
    return (
        f'<li class="tpu-nb-{problem.severity}" style="color:{colour};margin-bottom:4px">'
        f"<strong>{html.escape(problem.severity.capitalize())}</strong> "
        f"[{html.escape(problem.code)}] {html.escape(problem.message)}<br>"
        f"Fix: <code>{html.escape(problem.fix)}</code></li>"
    )


def _holders_html(holders: tuple[DeviceHolder, ...]) -> str:
    if not holders:
        return ""
    header = "".join(f'<th style="{_CELL_STYLE}">{html.escape(column)}</th>' for column in _HOLDER_COLUMNS)
    rows = "".join(
        "<tr>" + "".join(f'<td style="{_CELL_STYLE}">{html.escape(value)}</td>' for value in _holder_cells(holder)) + "</tr>"
        for holder in holders
    )
    return (
        '<div class="tpu-nb-holders"><p><strong>Processes holding the TPU</strong></p>'
        f'<table style="border-collapse:collapse"><thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table></div>'
    )


def _holder_cells(holder: DeviceHolder) -> tuple[str, ...]:
    age = "unknown" if holder.age is None else describe_age(holder.age)
    return (str(holder.pid), holder.command, ", ".join(holder.paths), age, holder.owner or "unknown", holder.origin_text)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
