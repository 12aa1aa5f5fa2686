"""Picker tests: offline, with a tiny local model next to the "notebook" (a temporary working directory)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from recipes.recipe_support import save_tiny_bert


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("models") / "tiny-bert")


@pytest.fixture
def notebook_dir(tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The notebook's working directory, holding a model directory "./tiny-bert" and a CSV file."""
    shutil.copytree(tiny_bert, tmp_path / "tiny-bert")
    (tmp_path / "reviews.csv").write_text(
        "review,sentiment,stars\n"
        + "".join(f"the plot was {'great' if index % 2 else 'dull'},{'pos' if index % 2 else 'neg'},{index % 5}\n" for index in range(60))
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


class FakeShell:
    """What the picker uses of an IPython shell: the user namespace and set_next_input."""

    def __init__(self) -> None:
        self.user_ns: dict[str, Any] = {}
        self.next_inputs: list[tuple[str, bool]] = []

    def set_next_input(self, text: str, replace: bool = False) -> None:
        self.next_inputs.append((text, replace))


@pytest.fixture
def shell() -> FakeShell:
    return FakeShell()
