"""Platform snapshots (tests/runtime/fixtures/*.json) as fake machines for detect().

A snapshot holds `environ`, `files` (path under the fake root -> text; device
nodes are empty files), `links` (proc/<pid>/fd/<n> -> target), `modules`
(names faked as imported), `packages` (distribution -> version) and `own_pid`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tpu_nb.runtime import Problem, RuntimeInfo, SystemView

FIXTURES = Path(__file__).parent.parent / "runtime" / "fixtures"
CPU_INSTALL = "pip install 'tpu_nb[xla]'"

MakeSystem = Callable[..., SystemView]
FakeTorchXla = Callable[[bool], types.ModuleType]
V = TypeVar("V")


def codes(info: RuntimeInfo) -> list[str]:
    """The codes of the problems detection found."""
    return [problem.code for problem in info.problems]


def problem(info: RuntimeInfo, code: str) -> Problem:
    """The one problem with `code`."""
    (found,) = [problem for problem in info.problems if problem.code == code]
    return found


def materialise(snapshot: Mapping[str, Any], root: Path, modules: Mapping[str, object]) -> SystemView:
    """Write the snapshot's files and links under `root` and view that as the machine."""
    for relative, text in snapshot["files"].items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for relative, target in snapshot["links"].items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        # Targets are paths on the faked machine; they need not exist here.
        os.symlink(target, path)
    packages = {_normalise(name): version for name, version in snapshot["packages"].items()}
    return SystemView(
        environ=dict(snapshot["environ"]),
        sys_root=root / "sys",
        dev_root=root / "dev",
        proc_root=root / "proc",
        modules=dict(modules),
        package_version=lambda name: packages.get(_normalise(name)),
        own_pid=snapshot["own_pid"],
    )


@pytest.fixture
def make_system(tmp_path: Path) -> MakeSystem:
    """Build a SystemView from a named snapshot, with per-test changes.

    In `environ`, `packages` and `modules` a value of None removes the entry;
    other `modules` values are the objects to fake under those names.
    """

    def make(
        name: str,
        *,
        environ: Mapping[str, str | None] | None = None,
        packages: Mapping[str, str | None] | None = None,
        modules: Mapping[str, object | None] | None = None,
        files: Mapping[str, str] | None = None,
        links: Mapping[str, str] | None = None,
    ) -> SystemView:
        snapshot = json.loads((FIXTURES / f"{name}.json").read_text())
        snapshot["environ"] = _merge(snapshot["environ"], environ or {})
        snapshot["packages"] = _merge(snapshot["packages"], packages or {})
        snapshot["files"].update(files or {})
        snapshot["links"].update(links or {})
        fake_modules = _merge({module: types.ModuleType(module) for module in snapshot["modules"]}, modules or {})
        root = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=tmp_path))
        return materialise(snapshot, root, fake_modules)

    return make


@pytest.fixture
def fake_torch_xla() -> Callable[[bool], types.ModuleType]:
    """Make a stand-in for an imported torch_xla whose runtime is (or is not) started."""

    def make(runtime_initialized: bool) -> types.ModuleType:
        module = types.ModuleType("torch_xla")
        module._XLAC = types.SimpleNamespace(  # type: ignore[attr-defined]
            _xla_runtime_is_initialized=lambda: runtime_initialized
        )
        return module

    return make


def _merge(base: Mapping[str, V], changes: Mapping[str, V | None]) -> dict[str, V]:
    merged = dict(base)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def _normalise(distribution: str) -> str:
    # importlib.metadata treats torch_xla, torch-xla and Torch.XLA alike.
    return re.sub(r"[-_.]+", "-", distribution).lower()
