"""`import tpu_nb.picking` stays cheap: ipywidgets and the ML libraries load when a picker is made."""

from __future__ import annotations

import json
import subprocess
import sys


def test_importing_the_picker_imports_no_heavy_library() -> None:
    heavy = ("IPython", "ipywidgets", "torch", "torch_xla", "transformers", "datasets")
    script = f"import json, sys, tpu_nb.picking; print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []
