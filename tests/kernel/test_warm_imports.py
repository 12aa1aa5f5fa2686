"""The kernel kept warm: what a run's supervisor imported with torch_xla, imported into the kernel after the run, never torch_xla."""

from __future__ import annotations

import sys
from pathlib import Path

from tpu_nb.kernel import warm_imports
from tpu_nb.wire.results import save_imported_modules


def test_only_modules_the_kernel_lacks_are_imported_and_never_torch_xlas_or_tpu_nbs(tmp_path: Path) -> None:
    names = ["wave", "os", "torch_xla", "torch_xla.core.xla_model", "_XLAC", "tpu_nb.workers.host", "__mp_main__", "no_such_module_here"]
    save_imported_modules(names, tmp_path)
    assert warm_imports.modules_to_import(tmp_path) == sorted(name for name in names if name in ("wave", "no_such_module_here"))


def test_a_helper_thread_imports_them_and_a_fork_waits_for_it(tmp_path: Path) -> None:
    sys.modules.pop("wave", None)
    save_imported_modules(["wave", "no_such_module_here"], tmp_path)
    warm_imports.warm_up_after(tmp_path)
    warm_imports.wait()  # what the kernel does before it forks
    assert "wave" in sys.modules and "no_such_module_here" not in sys.modules  # one that fails is left to the supervisor


def test_a_run_without_the_list_warms_nothing(tmp_path: Path) -> None:
    assert warm_imports.modules_to_import(tmp_path) == []
