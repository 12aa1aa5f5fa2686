"""The kernel kept warm: what a run's supervisor imported with torch_xla, imported into the kernel between cells, never torch_xla."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell

from tpu_nb.kernel.run import warm_imports
from tpu_nb.wire.supervisor_report import save_imported_modules


def test_only_modules_the_kernel_lacks_are_imported_and_never_torch_xlas_or_tpu_nbs(tmp_path: Path) -> None:
    sys.modules.pop("wave", None)  # imported by another test of this process
    names = [
        "wave",
        "os",
        "torch_xla",
        "torch_xla.core.xla_model",
        "_XLAC",
        "tpu_nb.workers.processes.pod_host",
        "__mp_main__",
        "no_such_module_here",
    ]
    save_imported_modules(names, tmp_path)
    assert warm_imports.modules_to_import(tmp_path) == sorted(name for name in names if name in ("wave", "no_such_module_here"))


def test_they_are_imported_after_the_cell_that_ran_and_the_next_cell_waits_for_them(ip: InteractiveShell, tmp_path: Path) -> None:
    sys.modules.pop("wave", None)
    save_imported_modules(["wave", "no_such_module_here"], tmp_path)
    ip.user_ns["warm_up"] = lambda: warm_imports.warm_up_after(tmp_path)
    # During the cell that ran (a %%tpu_train cell ends its run, then goes on), nothing is imported beside it.
    ip.run_cell("warm_up()\nduring = 'wave' in __import__('sys').modules")
    assert ip.user_ns["during"] is False
    ip.run_cell("after = 'wave' in __import__('sys').modules")  # the cell waited for the helper thread
    assert ip.user_ns["after"] is True and "no_such_module_here" not in sys.modules  # one that fails is left to the supervisor
    assert warm_imports._start_between_cells not in ip.events.callbacks["post_run_cell"]  # done: no handler left
    assert warm_imports._finish_before_the_cell not in ip.events.callbacks["pre_run_cell"]


def test_unloading_the_extension_leaves_no_handler(ip: InteractiveShell, tmp_path: Path) -> None:
    save_imported_modules(["wave", "no_such_module_here"], tmp_path)
    sys.modules.pop("wave", None)
    warm_imports.warm_up_after(tmp_path)
    assert warm_imports._start_between_cells in ip.events.callbacks["post_run_cell"]
    ip.run_line_magic("unload_ext", "tpu_nb")
    ip.run_cell("1")
    assert "wave" not in sys.modules and warm_imports._finish_before_the_cell not in ip.events.callbacks["pre_run_cell"]
    ip.run_line_magic("load_ext", "tpu_nb")  # as the fixture left it


def test_a_script_has_no_cells_and_is_not_warmed(tmp_path: Path) -> None:
    save_imported_modules(["wave"], tmp_path)
    script = (
        "import sys\nfrom pathlib import Path\nfrom tpu_nb.kernel.run import warm_imports\n"
        f"warm_imports.warm_up_after(Path({str(tmp_path)!r}))\nwarm_imports.wait()\nprint('wave' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_a_run_without_the_list_warms_nothing(tmp_path: Path) -> None:
    assert warm_imports.modules_to_import(tmp_path) == []
