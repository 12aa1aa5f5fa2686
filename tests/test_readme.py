"""The README's quick start runs as printed: its cells, parsed out of README.md, in a real kernel on XLA:CPU."""

from __future__ import annotations

import re
import time
from pathlib import Path

from support.kernel import errors_of, started_kernel, text_of

README = Path(__file__).resolve().parents[1] / "README.md"


def quick_start_cells() -> list[str]:
    """The ```python blocks of the README's "Quick start" section, in order."""
    section = README.read_text().split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```$", section, flags=re.S | re.M)


def test_the_quick_start_trains_as_printed(tmp_path: Path) -> None:
    cells = quick_start_cells()
    assert [cell.splitlines()[0] for cell in cells[2:4]] == ["%%tpu_train --return model"] * 2  # the loop, then the Trainer
    assert "DistributedSampler(" in cells[2]
    started = time.monotonic()
    with started_kernel(cwd=tmp_path) as kernel:
        ran = [kernel.run(cell, timeout=300) for cell in cells]
    seconds = time.monotonic() - started
    for cell in ran:
        assert not errors_of(cell), text_of(cell)
    info, _data, loop, trainer, use = map(text_of, ran)
    assert "Ready: %%tpu_train will start 1 worker on CPU." in info
    for run in (loop, trainer):
        assert "%%tpu_train done after" in run and "step 32/32 (100%)" in run, run
        assert "tpu_nb: updated `model` in place with rank 0's trained weights." in run, run
    assert (tmp_path / "out").is_dir()  # the Trainer's output directory, in the notebook's directory
    accuracy = float(re.search(r"accuracy: ([\d.]+)", use).group(1))  # type: ignore[union-attr]
    assert accuracy > 0.9, use  # untrained: about 0.5
    print(f"README quick start: {seconds:.0f}s, accuracy {accuracy:.2f}")
