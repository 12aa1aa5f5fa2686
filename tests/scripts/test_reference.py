"""docs/reference/ says what the code says: regenerated, it is unchanged; every option, magic and public name is in it."""

from __future__ import annotations

import builtins
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import tpu_nb
import tpu_nb.checkpoint
import tpu_nb.pod
import tpu_nb.recipes
import tpu_nb.spmd
from tpu_nb.kernel.planning.declared_options import OPTIONS
from tpu_nb.magics import TpuMagics

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
    options, magics, python, recipes = ((reference / name).read_text() for name in ("options.md", "magics.md", "python.md", "recipes.md"))
    for option in OPTIONS:
        assert f'<a id="{option.name}"></a>`{option.name}`' in options
        assert option.flag in options or "cell" not in option.surfaces
    registered = TpuMagics.magics  # what %load_ext tpu_nb adds: a cell magic shows as %%, a line magic as %
    for name in registered["line"]:
        assert f"## `%{name}`" in magics or f"## `%%{name}`" in magics, name
    for name in registered["cell"]:
        assert f"## `%%{name}`" in magics, name
    defined = {name for name, value in vars(tpu_nb).items() if _public(name, value)} | set(tpu_nb._LAZY)
    assert defined <= set(tpu_nb.__all__), defined - set(tpu_nb.__all__)  # nothing public left out of __all__
    public = [f"tpu_nb.{name}" for name in tpu_nb.__all__ if name not in _NOT_IN_THE_REFERENCE]
    public += ["tpu_nb.pod.launch", "tpu_nb.pod.results", "tpu_nb.checkpoint.track", "tpu_nb.checkpoint.skip"]
    public += [f"tpu_nb.spmd.{name}" for name in tpu_nb.spmd.__all__]
    public += ["tpu_nb.selftest.run", "tpu_nb.runtime.detect"]
    assert {"tpu_nb.launch", "tpu_nb.report", "tpu_nb.TpuNbWarning", "tpu_nb.BackgroundRun"} <= set(public)
    for name in public:
        assert f"`{name}`" in python, name
    for name in tpu_nb.recipes.__all__:
        assert f"## `tpu_nb.recipes.{name}`" in recipes, name
    for returned in ("SweepResult", "PodResult", "StackReport", "SelftestReport", "RuntimeInfo"):
        assert f"### {returned} (" in python, returned


_NOT_IN_THE_REFERENCE = ("load_ipython_extension", "unload_ipython_extension", "checkpoint", "pod", "spmd")
"""The extension's hooks (what %load_ext calls) and the submodules, whose names are listed one by one above."""


def _public(name: str, value: object) -> bool:
    """A name `tpu_nb` defines for its users (not one it imports for itself, nor a submodule)."""
    return (
        not name.startswith("_")
        and getattr(value, "__module__", None) == "tpu_nb"
        and name not in ("load_ipython_extension", "unload_ipython_extension")
    )


def test_the_help_of_tpu_train_gives_the_default_of_cores_per_trial() -> None:
    magics = (REPO / "docs" / "reference" / "magics.md").read_text()
    assert re.search(r"--cores-per-trial K +With --trials: .*\n.*Default: 1\.", magics)


def test_nothing_internal_is_published() -> None:
    python = (REPO / "docs" / "reference" / "python.md").read_text()
    assert "run.follow(" not in python  # how the launcher starts a handle's thread
    assert "tpu_nb.workers." not in python and "tpu_nb.kernel." not in python  # rooms, not the public API


def test_every_magic_help_points_at_its_guide_by_address() -> None:
    magics = (REPO / "docs" / "reference" / "magics.md").read_text()
    for section in magics.split("\n## ")[1:]:
        assert "Guide: https://github.com/tpu-nb/tpu_nb/blob/main/docs/guides/" in section, section.splitlines()[0]


def test_every_exception_errors_md_names_is_importable_where_it_says() -> None:
    """The exceptions table says "Importable from `tpu_nb`"; the recipes' table names `tpu_nb.recipes`' errors."""
    errors = (REPO / "docs" / "reference" / "errors.md").read_text()
    exceptions = errors.split("\n## The exceptions\n", 1)[1].split("\n## ", 1)[0]
    assert "Importable from `tpu_nb`" in exceptions
    named = re.findall(r"^\| (?:<a id=\"\w+\"></a>)?`(\w+)`", exceptions, flags=re.M)
    assert "LaunchRefused" in named and "CheckpointMismatch" in named
    missing = [name for name in named if name != "UsageError" and not _is_exception(getattr(tpu_nb, name, None))]
    recipes = errors.split("\n## The recipes and the picker\n", 1)[1].split("\n## ", 1)[0]
    recipe_errors = re.findall(r"^\| `([A-Z]\w+)`", recipes, flags=re.M)
    assert "InvalidConfig" in recipe_errors
    missing += [
        f"recipes.{name}" for name in recipe_errors if not _is_exception(getattr(tpu_nb.recipes, name, getattr(builtins, name, None)))
    ]
    assert missing == [], f"errors.md says these can be caught as tpu_nb.<Name> (tpu_nb.recipes.<Name>): {missing}"


def _is_exception(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseException)
