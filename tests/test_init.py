"""The package's face (tpu_nb/__init__.py): cheap to import, and every name it offers importable from it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import tpu_nb

ERRORS = Path(__file__).resolve().parent.parent / "docs" / "reference" / "errors.md"


def test_import_tpu_nb_is_cheap() -> None:
    script = "import sys, tpu_nb; print(json.dumps(sorted(m for m in ('IPython', 'ipywidgets', 'torch', 'torch_xla', 'transformers') if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", "import json; " + script], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


def test_every_exception_errors_md_lists_as_importable_from_tpu_nb_is() -> None:
    section = ERRORS.read_text().split("## The exceptions", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r'<a id="[a-z]+"></a>`(\w+)`', section)
    assert {"LaunchRefused", "StopTraining", "CheckpointMismatch", "CheckpointUnusable"} <= set(listed)
    for name in listed:
        assert name in tpu_nb.__all__
        assert issubclass(getattr(tpu_nb, name), BaseException)


def test_every_name_in_all_is_there() -> None:
    for name in tpu_nb.__all__:
        assert getattr(tpu_nb, name) is not None
    assert tpu_nb.TpuNbWarning.__module__ == "tpu_nb.errors"
