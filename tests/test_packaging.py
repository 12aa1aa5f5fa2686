"""What `pip install tpu_nb` ships: setup.cfg's `packages = find:` takes only folders with an `__init__.py`."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tpu_nb"


def test_every_folder_of_modules_is_a_package() -> None:
    folders = {path.parent for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts}
    missing = sorted(str(folder.relative_to(PACKAGE.parent)) for folder in folders if not (folder / "__init__.py").exists())
    assert missing == [], "add an __init__.py: a non-editable install leaves these out"
