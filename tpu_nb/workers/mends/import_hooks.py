"""Patch a library's module in a worker as soon as it is imported (now, if the notebook imported it before the fork)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

Patch = Callable[[ModuleType], None]


def when_imported(name: str, patch: Patch) -> None:
    """Call `patch(module)` once module `name` is imported: at once if it is, else right after its import runs."""
    module = sys.modules.get(name)
    if module is not None:
        patch(module)
    else:
        sys.meta_path.insert(0, _PatchOnImport(name, patch))


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds module `name` as Python would, and patches it right after it executes."""

    def __init__(self, name: str, patch: Patch) -> None:
        self.name = name
        self.patch = patch

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original_exec = loader.exec_module
        patch = self.patch

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
