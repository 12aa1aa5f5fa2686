"""`import tpu_nb.recipes` stays cheap: every TPU worker imports tpu_nb."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("IPython", "ipywidgets", "torch", "torch_xla", "transformers", "datasets", "numpy", "huggingface_hub")


def imported_after(statement: str) -> list[str]:
    script = f"import json, sys; {statement}; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_importing_the_recipes_imports_no_heavy_library() -> None:
    assert imported_after("import tpu_nb.recipes; from tpu_nb.recipes import TrainConfig, prepare, check, code_for") == []


def test_a_configuration_can_be_written_and_checked_without_them() -> None:
    statement = "from tpu_nb.recipes import TrainConfig, validate, code_for; c = TrainConfig(model='m'); validate(c); code_for(c)"
    assert imported_after(statement) == []
