"""Each package's docstring is its room map: it names every module and room in it, so the map cannot fall behind the tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tpu_nb"
LAYOUT = PACKAGE.parent / "docs" / "concepts" / "how-it-works.md"
# The package face's docstring is what help(tpu_nb) shows users; its map is the layout in how-it-works.md.
ROOMS = sorted(path.parent for path in PACKAGE.glob("*/**/__init__.py") if "__pycache__" not in path.parts)


def contents(room: Path) -> list[str]:
    """The modules (without .py) and rooms (packages) directly in a room."""
    modules = [path.stem for path in room.glob("*.py") if path.name != "__init__.py"]
    rooms = [path.name for path in room.iterdir() if (path / "__init__.py").is_file()]
    return sorted(modules + rooms)


@pytest.mark.parametrize("room", ROOMS, ids=[str(room.relative_to(PACKAGE.parent)) for room in ROOMS])
def test_a_rooms_docstring_names_everything_in_it(room: Path) -> None:
    docstring = ast.get_docstring(ast.parse((room / "__init__.py").read_text())) or ""
    named = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", docstring))
    missing = [name for name in contents(room) if name not in named]
    assert not missing, f"{room.relative_to(PACKAGE.parent)}/__init__.py's docstring does not name {missing}"


def test_the_layout_in_how_it_works_names_every_room_and_module_of_the_package() -> None:
    layout = LAYOUT.read_text().split("## Layout", 1)[1]
    named = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", layout))
    missing = [name for name in contents(PACKAGE) if name not in named]
    assert not missing, f"docs/concepts/how-it-works.md's layout does not name {missing}"


def test_the_maps_are_read_from_the_tree() -> None:
    """The test above could pass by finding nothing: it sees the rooms and modules that are there."""
    names = {str(room.relative_to(PACKAGE.parent)) for room in ROOMS}
    assert {"tpu_nb/kernel", "tpu_nb/kernel/trials", "tpu_nb/workers/processes", "tpu_nb/basics"} <= names
    assert "worker" in contents(PACKAGE / "workers" / "processes")
