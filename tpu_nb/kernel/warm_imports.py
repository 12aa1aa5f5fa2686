"""A kernel kept warm for its next run: the modules torch_xla builds on, imported into the kernel after a run, never torch_xla.

Every run forks a supervisor that imports torch_xla. Most of that import's
2-4 s is torch's own compiler stack (torch._dynamo, torch._inductor,
functorch, sympy, networkx), which torch_xla imports at its top. The first
run's supervisor leaves the list of the modules its import brought in; when
the run ends, a helper thread imports in the kernel those that are not
torch_xla's, while the user reads the result. The next supervisor finds them
imported (fork shares them) and imports torch_xla alone, in about 0.1 s.

Never imported into the kernel: torch_xla and its extension (`_XLAC`), whose
import sets XLA_FLAGS and other environment variables, changes torch's
dynamo configuration, registers an exit hook and selects a device; so the
kernel's environment and torch's settings stay as the user left them, and
the XLA runtime is never started here. The modules imported are plain
imports of installed packages, which start no threads and set nothing
(tested). Before the kernel forks again it waits for the helper thread: a
fork in the middle of an import would copy a held import lock into the child.
"""

from __future__ import annotations

import importlib
import sys
import threading
from pathlib import Path

from tpu_nb.wire.results import load_imported_modules

_NEVER = ("torch_xla", "_XLAC", "tpu_nb", "__main__", "__mp_main__")
"""torch_xla itself (and its extension), tpu_nb, and the forked processes' main modules."""

_warming: threading.Thread | None = None


def warm_up_after(run_dir: Path) -> None:
    """Import into the kernel, in a helper thread, what the run's supervisor imported with torch_xla (but torch_xla)."""
    global _warming
    wait()
    names = modules_to_import(run_dir)
    if names:
        _warming = threading.Thread(target=_import_all, args=(names,), name="tpu_nb-warm-imports", daemon=True)
        _warming.start()


def modules_to_import(run_dir: Path) -> list[str]:
    """What the run's supervisor imported that the kernel has not, but torch_xla's own modules and tpu_nb's."""
    return [name for name in load_imported_modules(run_dir) if name not in sys.modules and not name.startswith(_NEVER)]


def wait() -> None:
    """Until the helper thread has finished its imports (before a fork)."""
    if _warming is not None:
        _warming.join()


def _import_all(names: list[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that cannot be imported here is imported by the supervisor, as before
            continue
