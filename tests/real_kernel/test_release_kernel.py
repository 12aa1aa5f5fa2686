"""`%tpu_release` on a TPU VM shared by notebooks: it ends what a SIGKILLed kernel left, and another live notebook's run only when named.

Three real kernels, each started as a notebook server starts one (a session
of its own). The TPU's device files are plain files here (the kernel that
releases looks at them through SystemView, as tests/kernel/tpu/test_release.py
does in-process); every process is real.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from support.kernel import Kernel, started_kernel, text_of
from support.processes import wait_until

SEES_THE_FAKE_TPU = """
from pathlib import Path
from tpu_nb.runtime import SystemView
SystemView.current = classmethod(lambda cls: SystemView(dev_root=Path({dev!r})))
"""

# A run started from a cell: a process holding a TPU device file until it is ended. In a process group of its own,
# as tpu_nb's runs are: jupyter_client 7 (Colab's) kills a dead kernel's whole group when it cleans up after it.
HOLD = """
import subprocess, sys
holder = subprocess.Popen(
    [sys.executable, "-c", "import sys, time; held = open(sys.argv[1]); print('holding', flush=True); time.sleep(600)", {path!r}],
    stdout=subprocess.PIPE, text=True, process_group=0,
)
assert holder.stdout.readline() == "holding\\n"
print("HOLDER", holder.pid)
"""


def holder_started(kernel: Kernel, path: Path) -> int:
    cell = kernel.run(HOLD.format(path=str(path)), allow_errors=False)
    return int(text_of(cell).split("HOLDER ")[1].split()[0])


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_release_ends_what_a_killed_kernel_left_and_another_notebooks_run_only_when_named(kernel: Kernel, tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "accel0").touch()
    (dev / "accel1").touch()
    kernel.run("%load_ext tpu_nb", allow_errors=False)
    kernel.run(SEES_THE_FAKE_TPU.format(dev=str(dev)), allow_errors=False)
    holders = []
    try:
        with started_kernel() as other:
            live = holder_started(other, dev / "accel0")
            holders.append(live)
            with started_kernel() as dying:
                orphan = holder_started(dying, dev / "accel1")
                holders.append(orphan)
                os.kill(dying.pid, signal.SIGKILL)  # the kernel dies; its run goes on, adopted by init
                assert wait_until(lambda: not alive(dying.pid), 10)

            released = text_of(kernel.run("%tpu_release --grace 5", allow_errors=False))

            assert f"pid {orphan} (" in released and "): ended by SIGTERM" in released, released
            assert not alive(orphan)
            assert f"pid {live} (" in released, released
            assert f"live: started from another notebook, kernel pid {other.pid} (" in released, released
            assert f"Fix: %tpu_release {live} ends it" in released, released
            assert alive(live)  # never ended while its notebook runs it

            released = text_of(kernel.run(f"%tpu_release {live} --grace 5", allow_errors=False))

            assert f"pid {live} (" in released and "): ended by SIGTERM" in released, released
            assert not alive(live)
            assert "still here" in text_of(other.run("print('still here')"))  # the other notebook's kernel is untouched
    finally:
        for pid in holders:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
