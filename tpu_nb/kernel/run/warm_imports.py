"""A kernel kept warm for its next run: the modules torch_xla builds on, imported into the kernel between cells, never torch_xla.

Every run forks a supervisor that imports torch_xla. Most of that import's
2-4 s is torch's own compiler stack (torch._dynamo, torch._inductor,
functorch, sympy, networkx), which torch_xla imports at its top. The first
run's supervisor leaves the list of the modules its import brought in; when
the cell that ran it has ended, a helper thread imports in the kernel those
that are not torch_xla's, while the user reads the result. The next
supervisor finds them imported (fork shares them) and imports torch_xla
alone, in about 0.1 s.

Only between cells: the next cell waits for the helper thread before it
runs (IPython's pre_run_cell event). Imports of torch's modules in two
threads at once are not safe: its modules import each other in cycles, and
Python hands a thread that would deadlock a half-made module. A user's
`from transformers import Trainer` (which imports torch_xla) right after a
run failed that way with "name 'runtime' is not defined". Outside IPython
(a script calling tpu_nb.launch) there are no cells and nothing is warmed.

Never imported into the kernel: torch_xla and its extension (`_XLAC`), whose
import sets XLA_FLAGS and other environment variables, changes torch's
dynamo configuration, registers an exit hook and selects a device; so the
kernel's environment and torch's settings stay as the user left them, and
the XLA runtime is never started here. The modules imported are plain
imports of installed packages, which start no threads and set nothing. Before the kernel forks again it waits for the helper thread: a
fork in the middle of an import would copy a held import lock into the child.
"""

from __future__ import annotations

import importlib
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from tpu_nb.wire.supervisor_report import load_imported_modules

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

_NEVER = ("torch_xla", "_XLAC", "tpu_nb", "__main__", "__mp_main__")
"""torch_xla itself (and its extension), tpu_nb, and the forked processes' main modules."""

_warming: threading.Thread | None = None
_waiting: list[str] = []  # modules to import when the running cell ends


def warm_up_after(exchange_dir: Path) -> None:
    """Import into the kernel, once the running cell has ended, what the run's supervisor imported with torch_xla (but torch_xla)."""
    shell = _shell()
    names = modules_to_import(exchange_dir)
    if shell is None or not names:
        return
    _waiting[:] = names
    if _start_between_cells not in shell.events.callbacks["post_run_cell"]:
        shell.events.register("post_run_cell", _start_between_cells)
        shell.events.register("pre_run_cell", _finish_before_the_cell)


def modules_to_import(exchange_dir: Path) -> list[str]:
    """What the run's supervisor imported that the kernel has not, but torch_xla's own modules and tpu_nb's."""
    return [name for name in load_imported_modules(exchange_dir) if name not in sys.modules and not name.startswith(_NEVER)]


def wait() -> None:
    """Until the helper thread has finished its imports (before a fork, before a cell)."""
    if _warming is not None:
        _warming.join()


def cancel(shell: InteractiveShell) -> None:
    """Nothing left to warm and no event handler of ours (`%unload_ext tpu_nb`); an import under way finishes."""
    _waiting.clear()
    wait()
    _forget_handlers(shell)


def _start_between_cells(result: object) -> None:
    global _warming
    wait()
    names, _waiting[:] = list(_waiting), []
    if names:
        _warming = threading.Thread(target=_import_all, args=(names,), name="tpu_nb-warm-imports", daemon=True)
        _warming.start()


def _finish_before_the_cell(info: object) -> None:
    wait()
    if not _waiting:  # else a background run ended during the last cell: warm after this one
        shell = _shell()
        if shell is not None:
            _forget_handlers(shell)


def _forget_handlers(shell: InteractiveShell) -> None:
    for event, handler in (("post_run_cell", _start_between_cells), ("pre_run_cell", _finish_before_the_cell)):
        if handler in shell.events.callbacks[event]:
            shell.events.unregister(event, handler)


def _shell() -> InteractiveShell | None:
    if "IPython" not in sys.modules:  # a script: no cells to warm between
        return None
    from IPython import get_ipython

    return get_ipython()  # type: ignore[no-any-return]


def _import_all(names: list[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that cannot be imported here is imported by the supervisor, as before
            continue
