from __future__ import annotations

import os
import pwd
import re
import types
from collections.abc import Callable
from html.parser import HTMLParser

import pytest

from tpu_nb.runtime import RuntimeInfo, RuntimePanel, SystemView, detect
from tpu_nb.runtime.device_holders import describe_age

MakeSystem = Callable[..., SystemView]
FakeTorchXla = Callable[[bool], types.ModuleType]


class _PanelParser(HTMLParser):
    """Collects the table rows and the problem items, as text a reader would see."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, str] = {}
        self.problems: list[tuple[str, str, str]] = []  # (class, style, text)
        self.codes: list[str] = []
        self._cell: list[str] | None = None
        self._label = ""
        self._open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open.append(tag)
        attributes = dict(attrs)
        if tag in ("th", "td"):
            self._cell = []
        if tag == "li":
            self.problems.append((attributes.get("class") or "", attributes.get("style") or "", ""))
        if tag == "code":
            self.codes.append("")

    def handle_endtag(self, tag: str) -> None:
        self._open.pop()
        if tag == "th" and self._cell is not None:
            self._label = "".join(self._cell)
        if tag == "td" and self._cell is not None:
            self.rows[self._label] = "".join(self._cell)
        if tag in ("th", "td"):
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if "li" in self._open:
            css_class, style, text = self.problems[-1]
            self.problems[-1] = (css_class, style, text + data)
        if self._open and self._open[-1] == "code":
            self.codes[-1] += data


def parse(html: str) -> _PanelParser:
    parser = _PanelParser()
    parser.feed(html)
    parser.close()
    return parser


def _code_of(problem_text: str) -> str:
    match = re.search(r"\[(\w+)\]", problem_text)
    assert match, problem_text
    return match.group(1)


class _RecordingPrinter:
    def __init__(self) -> None:
        self.written: list[str] = []

    def text(self, obj: str) -> None:
        self.written.append(obj)


@pytest.fixture
def troubled_tpu(make_system: MakeSystem, fake_torch_xla: FakeTorchXla) -> RuntimeInfo:
    """Kaggle v5e-8 with its preset variables, a used runtime and a stuck worker with an odd name."""
    system = make_system(
        "kaggle_v5e_8",
        environ={"TPU_ACCELERATOR_TYPE": "v5litepod-8<script>"},
        modules={"torch_xla": fake_torch_xla(True)},
        # A worker whose kernel (session 4000) is gone: it has the kernel's JPY_PARENT_PID.
        files={
            "proc/4242/comm": "<b>py</b>&co\n",
            "proc/4242/stat": "4242 (py) S 1 4242 4000 " + "0 " * 15 + "6000 0 0\n",
            "proc/4242/environ": "JPY_PARENT_PID=12\0",
        },
        links={"proc/4242/fd/7": "/dev/vfio/3"},
    )
    return detect(system)


@pytest.fixture
def cpu_laptop(make_system: MakeSystem) -> RuntimeInfo:
    return detect(make_system("cpu_laptop"))


def test_html_table_shows_the_tpu_runtime(troubled_tpu: RuntimeInfo) -> None:
    panel = parse(RuntimePanel(troubled_tpu)._repr_html_())

    assert panel.rows["Platform"] == "Kaggle"
    # The value comes back intact after unescaping: it was escaped, not mangled.
    assert panel.rows["Accelerator"] == "TPU v5e (v5litepod-8<script>), 8 chips"
    assert panel.rows["XLA devices"] == "8"
    assert panel.rows["Workers"] == "8 (1 device each)"
    assert panel.rows["PJRT device"] == "TPU"
    assert panel.rows["Versions"].startswith("Python ")
    assert "torch 2.8.0+cpu, torch_xla 2.8.0, libtpu 0.0.17, transformers 5.24.0" in panel.rows["Versions"]
    # Kaggle's torch + torch_xla stay: tpu_nb installs alone.
    assert panel.rows["Install"] == "pip install tpu_nb"


def test_html_escapes_every_value(troubled_tpu: RuntimeInfo) -> None:
    html = RuntimePanel(troubled_tpu)._repr_html_()

    assert "<script>" not in html and "<b>py</b>" not in html
    assert "v5litepod-8&lt;script&gt;" in html
    assert "&lt;b&gt;py&lt;/b&gt;&amp;co" in html


def test_html_marks_errors_red_and_warnings_amber_with_fixes_in_code(troubled_tpu: RuntimeInfo) -> None:
    panel = parse(RuntimePanel(troubled_tpu)._repr_html_())

    by_code = {_code_of(text): (css, style, text) for css, style, text in panel.problems}
    assert set(by_code) == {"runtime_initialized", "tpu_busy", "topology_vars"}
    for code in ("runtime_initialized", "tpu_busy"):
        css, style, text = by_code[code]
        assert css == "tpu-nb-error"
        assert "color:#c62828" in style
        assert text.startswith("Error ")
    css, style, text = by_code["topology_vars"]
    assert (css, "color:#b26a00" in style) == ("tpu-nb-warning", True)
    assert "pid 4242 (<b>py</b>&co) has /dev/vfio/3 open" in by_code["tpu_busy"][2]
    assert [problem.fix for problem in troubled_tpu.problems] == panel.codes
    assert "Run %tpu_release to end pid 4242 (or: kill 4242), or restart the runtime." in panel.codes


def test_html_says_the_launch_is_blocked(troubled_tpu: RuntimeInfo) -> None:
    html = RuntimePanel(troubled_tpu)._repr_html_()

    assert "Not ready: fix 2 errors before %%tpu_train." in html


def test_text_has_the_same_content(troubled_tpu: RuntimeInfo) -> None:
    text = repr(RuntimePanel(troubled_tpu))
    lines = text.splitlines()

    assert lines[0] == "tpu_nb runtime"
    assert "  Platform     Kaggle" in lines
    assert "  Accelerator  TPU v5e (v5litepod-8<script>), 8 chips" in lines
    assert "  Workers      8 (1 device each)" in lines
    assert "Not ready: fix 2 errors before %%tpu_train." in lines
    assert any(line.startswith("ERROR [runtime_initialized] An XLA device was already used") for line in lines)
    assert (
        "ERROR [tpu_busy] The TPU is held by another process: pid 4242 (<b>py</b>&co) has /dev/vfio/3 open, "
        "stale: the notebook kernel it was started from (session 4000) has exited (its environment holds the kernel's "
        "JPY_PARENT_PID)." in lines
    )
    assert "  fix: Run %tpu_release to end pid 4242 (or: kill 4242), or restart the runtime." in lines
    stale = "stale: the notebook kernel it was started from (session 4000) has exited (its environment holds the kernel's JPY_PARENT_PID)"
    assert lines[-2:] == ["Processes holding the TPU:", f"  pid 4242 (<b>py</b>&co) has /dev/vfio/3 open, {stale}"]
    assert any(line.startswith("WARNING [topology_vars]") for line in lines)
    assert "&lt;" not in text and "<td>" not in text


def test_pretty_printer_gets_the_text(troubled_tpu: RuntimeInfo) -> None:
    panel = RuntimePanel(troubled_tpu)
    printer = _RecordingPrinter()

    panel._repr_pretty_(printer, cycle=False)

    assert printer.written == [repr(panel)]


def test_cpu_laptop_html(cpu_laptop: RuntimeInfo) -> None:
    html = RuntimePanel(cpu_laptop)._repr_html_()
    panel = parse(html)

    assert panel.rows["Platform"] == "Jupyter"
    assert panel.rows["Accelerator"] == "CPU only"
    assert panel.rows["PJRT device"] == "CPU"
    assert panel.rows["Workers"] == "1 (1 device each)"
    assert "libtpu not installed" in panel.rows["Versions"]
    assert [(css, text.split(" ")[0]) for css, _, text in panel.problems] == [("tpu-nb-info", "Info")]
    assert "tpu-nb-error" not in html
    assert "Ready: %%tpu_train will start 1 worker on CPU." in html


def test_cpu_laptop_text(cpu_laptop: RuntimeInfo) -> None:
    lines = repr(RuntimePanel(cpu_laptop)).splitlines()

    assert "  Accelerator  CPU only" in lines
    assert "  XLA devices  1" in lines
    assert "Ready: %%tpu_train will start 1 worker on CPU." in lines
    problem_lines = [line for line in lines if line.startswith(("ERROR ", "WARNING ", "INFO "))]
    assert len(problem_lines) == 1
    assert problem_lines[0].startswith("INFO [no_tpu] No TPU attached")


def test_gpu_machine_names_the_unused_gpu(make_system: MakeSystem) -> None:
    panel = parse(RuntimePanel(detect(make_system("gpu_machine")))._repr_html_())

    assert panel.rows["Accelerator"] == "1 NVIDIA GPU (not used by tpu_nb)"
    assert "torch_xla not installed" in panel.rows["Versions"]
    # No torch_xla here: the xla extra brings the pinned torch + torch_xla pair.
    assert panel.rows["Install"] == "pip install 'tpu_nb[xla]'"


def test_the_processes_holding_the_tpu_are_a_table(make_system: MakeSystem) -> None:
    system = make_system(
        "colab_v5e_1",  # the kernel is pid 100
        files={
            "proc/stat": "btime 1764600000\n",
            "proc/110/status": f"State:\tS (sleeping)\nPPid:\t100\nUid:\t{os.getuid()}\n",
            "proc/110/cmdline": "python3\0-c\0<worker>\0",
            "proc/110/stat": "110 (python3) S 100 " + " ".join(["0"] * 17) + " 0 0 0\n",
        },
        links={"proc/110/fd/3": "/dev/vfio/0"},
    )
    info = detect(system)
    (holder,) = info.tpu_holders

    html = RuntimePanel(info)._repr_html_()
    section = html[html.index('<div class="tpu-nb-holders">') :]
    cells = re.findall(r'<t[hd] style="[^"]*">(.*?)</t[hd]>', section)

    assert "Processes holding the TPU" in section
    assert cells[:6] == ["pid", "command", "device files", "running for", "user", "from"]
    assert cells[6:] == [
        "110",
        "python3 -c &#x27;&lt;worker&gt;&#x27;",
        "/dev/vfio/0",
        describe_age(holder.seen_at - 1764600000),
        pwd.getpwuid(os.getuid()).pw_name,
        "started by this kernel (child of the kernel)",
    ]
    assert f"  {holder.summary}" in repr(RuntimePanel(info)).splitlines()


def test_no_holders_no_table(cpu_laptop: RuntimeInfo) -> None:
    assert "tpu-nb-holders" not in RuntimePanel(cpu_laptop)._repr_html_()
    assert "Processes holding the TPU" not in repr(RuntimePanel(cpu_laptop))


def test_the_panel_names_the_stack_it_uses_why_and_what_the_other_lacks(make_system: MakeSystem) -> None:
    colab = repr(RuntimePanel(detect(make_system("colab_v5e_1"))))
    assert "TPU stack    torch_xla 2.9.0: torch_xla is the stack that works with torch 2.9.0+cpu" in colab
    assert "Other stack  torch_tpu: not installed (it needs torch 2.11 to 2.15); pip install 'torch>=2.11" in colab
    packages = {"torch": "2.14.1", "torch_xla": None, "torch-tpu": "0.2.0", "libtpu": "0.0.52"}
    torch_tpu = RuntimePanel(detect(make_system("cloud_tpu_vm_v4_8", packages=packages)))
    text = repr(torch_tpu)
    assert "TPU stack    torch_tpu 0.2.0: TorchTPU is the stack that works with torch 2.14.1" in text
    assert "Other stack  torch_xla: not installed" in text and "torch_tpu 0.2.0" in text.split("Versions", 1)[1]
    assert "torch_tpu 0.2.0: TorchTPU is the stack" in torch_tpu._repr_html_()
