"""docs/reference/ says what the code says: regenerated, it is unchanged; every option, magic and public name is in it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import tpu_nb
import tpu_nb.checkpoint
import tpu_nb.pod
import tpu_nb.spmd
from tpu_nb.kernel.planning.declared_options import OPTIONS

REPO = Path(__file__).resolve().parents[2]


def _reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reference", REPO / "scripts" / "reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_is_what_the_code_says_now() -> None:
    stale = _reference().stale_pages()
    assert stale == [], f"{stale}: run `python scripts/reference.py` and commit docs/reference/"


def test_every_option_magic_and_public_name_is_in_the_reference() -> None:
    reference = REPO / "docs" / "reference"
    options, magics, python = ((reference / name).read_text() for name in ("options.md", "magics.md", "python.md"))
    for option in OPTIONS:
        assert f'<a id="{option.name}"></a>`{option.name}`' in options
        assert option.flag in options or "cell" not in option.surfaces
    for magic in ("%%tpu_train", "%tpu_prepare", "%tpu_info", "%tpu_checkpoints", "%tpu_release", "%tpu_picker", "%tpu_selftest"):
        assert f"## `{magic}`" in magics
    public = [f"tpu_nb.{name}" for name in ("launch", "report", "in_worker", "picker", "runtime_panel", "BackgroundRun")]
    public += [f"tpu_nb.{name}" for name in tpu_nb._LAZY]
    public += ["tpu_nb.pod.launch", "tpu_nb.pod.results", "tpu_nb.checkpoint.track", "tpu_nb.checkpoint.skip"]
    public += [f"tpu_nb.spmd.{name}" for name in tpu_nb.spmd.__all__]
    for name in public:
        assert f"`{name}`" in python, name
