"""The watchdog in a real kernel: each kind of silence gets its verdict at the cell's line within 2x the threshold; a healthy run none.

Runs end by --timeout once the report is out; the report stays in the
summary that replaces the dashboard. `run.stacks()` and a Kill that needs
SIGKILL are tried on a background run.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from support.kernel import Kernel, summary_of, text_of

TESTS = Path(__file__).resolve().parents[1]
THRESHOLD = 4


def stall_of(cell: object) -> str:
    """The summary's plain text from its watchdog report on (what `print(report)` shows)."""
    text = summary_of(cell)["text/plain"]
    assert "Where were they? " in text, text
    return text.split("Where were they? ", 1)[1]


def assert_said_in_time(report: str) -> None:
    seconds = re.search(r"has not moved for (\d+(?:\.\d)?)s", report)  # format_duration: "4.3s" under 10s
    assert seconds is not None and THRESHOLD <= float(seconds[1]) <= 2 * THRESHOLD, report


@pytest.mark.fresh_kernel  # process_world.install() makes every later run a process per device
def test_a_rank_asleep_at_step_8_leaves_the_others_in_a_collective_and_the_verdict_names_both(kernel: Kernel) -> None:
    kernel.run(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nfrom support.process_world import install\ninstall()", allow_errors=False)
    kernel.run("%load_ext tpu_nb\nimport time, torch", allow_errors=False)
    cell = kernel.run(
        f"""%%tpu_train --cores 4 --watchdog {THRESHOLD} --timeout 25
import torch_xla.core.xla_model as xm
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 1000):
    model(torch.randn(8, 4).to(device)).pow(2).mean().backward()
    xm.optimizer_step(optimizer)
    optimizer.zero_grad()
    if step == 8 and rank == 1:
        time.sleep(600)
    report(step=step)
""",
        timeout=180,
    )
    report = stall_of(cell)
    # Line 1 is the %%tpu_train line, as in tracebacks; rank 1 last reported step 7.
    assert report.startswith(
        f"Ranks 0, 2, 3 wait in a collective at In [{cell.execution_count}], line 7: xm.optimizer_step(optimizer) at step 8"
    ), report
    assert f"rank 1 is at step 7, sleeping at In [{cell.execution_count}], line 10: time.sleep(600)" in report, report
    assert_said_in_time(report)
    assert "Where are they?" in summary_of(cell)["text/html"]


LOOP = """%%tpu_train --watchdog {threshold} --timeout {timeout}
import queue
x = torch.randn(64, 64, device=device)
for step in range(1, 41):
    x = (x @ x).tanh()
    torch_xla.sync()
    if step == 4:
        SILENCE
    report(step=step)
    time.sleep(0.05)
"""


def run_loop(kernel: Kernel, silence: str, timeout: int = 11) -> nbformat.NotebookNode:
    return kernel.run(LOOP.format(threshold=THRESHOLD, timeout=timeout).replace("SILENCE", silence), timeout=180)


def stall_and_place(cell: nbformat.NotebookNode) -> tuple[str, str]:
    """The run's stall report and the cell's name in this kernel's history (In [n])."""
    return stall_of(cell), f"In [{cell.execution_count}]"


def test_a_queue_a_host_read_and_a_slow_compilation_each_get_their_verdict_and_a_healthy_run_none(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb\nimport time, torch, torch_xla", allow_errors=False)
    blocked, at = stall_and_place(run_loop(kernel, "queue.Queue().get()"))
    assert blocked.startswith(f"Rank 0 (step 3) waits on a queue, event or lock at {at}, line 8: queue.Queue().get() (threading.py"), (
        blocked
    )
    assert_said_in_time(blocked)

    reading, at = stall_and_place(run_loop(kernel, "total = sum(x.sum().item() for _ in range(10**9))"))
    assert reading.startswith(f"Rank 0 (step 3) is reading a value from the device at {at}, line 8"), reading
    assert_said_in_time(reading)

    # A graph of thousands of operations: XLA takes seconds to compile it.
    compiling, at = stall_and_place(
        run_loop(kernel, "y = x\n        for i in range(6000): y = torch.sin(y) * 1.0001 + i\n        torch_xla.sync()", 25)
    )
    assert compiling.startswith("Compiling: an XLA compilation has been running for"), compiling
    assert f"on rank 0 at {at}, line 10: torch_xla.sync()" in compiling, compiling
    assert_said_in_time(compiling)

    healthy = run_loop(kernel, "pass", timeout=120)
    assert "Where were they?" not in summary_of(healthy)["text/plain"] and "tpu-nb-stall" not in summary_of(healthy)["text/html"]


def test_a_background_run_answers_where_every_rank_is_and_a_kill_says_which_rank_needed_sigkill(kernel: Kernel) -> None:
    kernel.run("%load_ext tpu_nb\nimport time, torch, torch_xla", allow_errors=False)
    started = kernel.run(
        """%%tpu_train --background --name run
import ctypes
ctypes.CDLL(None).signal(15, 1)  # SIGTERM ignored, as by a library in C++ (the rank is not the main thread here)
for step in range(1, 100000):
    time.sleep(0.1)
    report(step=step, loss=1.0 / step)
""",
        allow_errors=False,
    )
    answer = kernel.run(
        "import time\nwhile not run.metrics and run.status == 'running': time.sleep(0.2)\n"
        "time.sleep(1)\nplace = run.stacks()\nprint(place.ranks[0].where)\nprint(place.verdict)",
        allow_errors=False,
        timeout=120,
    )
    at = f"In [{started.execution_count}]"
    assert f"{at}, line 5: time.sleep(0.1)" in text_of(answer) or f"{at}, line 6: report(step=step, loss=1.0 / step)" in text_of(answer), (
        text_of(answer)
    )
    killed = kernel.run("run.kill()\nprint(run.status)", timeout=60)
    assert "interrupted" in text_of(killed), text_of(killed)
    summary = summary_of(started)["text/plain"]  # the dashboard's place, in the cell that started the run
    assert re.search(r"note: rank 0 \(pid \d+\) did not end on SIGTERM within 2s: ended with SIGKILL", summary), summary
