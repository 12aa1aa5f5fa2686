"""Reading torch_xla's compilation analysis back, whole blocks only."""

from __future__ import annotations

from pathlib import Path

from tpu_nb.workers.doctor.analysis_log import HOST_READ_CAUSE, AnalysisLog, Frame, parse_blocks

# As torch_xla 2.9 wrote it for a `.item()` in a script (measured here).
BLOCK = """
Compilation Analysis: ================================================================================
Compilation Analysis: Compilation Cause
Compilation Analysis:   most likely user code trying to access tensor value before torch_xla.sync
Compilation Analysis: Graph Info:
Compilation Analysis:   Graph Hash: afca108977fe00ce1f8087f327da707b
Compilation Analysis:   Number of Graph Inputs: 3
Compilation Analysis:   Number of Graph Outputs: 1
Compilation Analysis: Python Frame Triggered Execution:
Compilation Analysis:   <module> (/tmp/doc/exp1.py:21)
Compilation Analysis: --------------------------------------------------------------------------------
Compilation Analysis: ================================================================================

Computation hash: d17d6aac9e0b276bf335a44ad6bb3b5d

Post Compilation Analysis: ================================================================================
Post Compilation Analysis: Graph input size: 0.000001 GB
Post Compilation Analysis: --------------------------------------------------------------------------------
Post Compilation Analysis: ================================================================================
"""

SYNC_BLOCK = (
    BLOCK.replace(f"  {HOST_READ_CAUSE}", "  user torch_xla.sync")
    .replace("afca10", "511d87")
    .replace(
        "  <module> (/tmp/doc/exp1.py:21)",
        "  sync (/venv/site-packages/torch_xla/torch_xla.py:87)\nCompilation Analysis:   train (/tmp/cell.py:16)",
    )
)


def test_a_block_gives_cause_hash_and_frames_innermost_first() -> None:
    [value_read, sync] = parse_blocks(BLOCK + SYNC_BLOCK)
    assert value_read.reads_a_value and value_read.graph_hash == "afca108977fe00ce1f8087f327da707b"
    assert value_read.frames == (Frame("<module>", "/tmp/doc/exp1.py", 21),)
    assert sync.cause == "user torch_xla.sync" and not sync.reads_a_value
    assert sync.frames == (Frame("sync", "/venv/site-packages/torch_xla/torch_xla.py", 87), Frame("train", "/tmp/cell.py", 16))
    assert value_read.structure == (3, 1)  # graphs alike in this differ in sizes, not in what they compute


def test_reads_only_what_was_appended_and_never_a_half_written_block(tmp_path: Path) -> None:
    path = tmp_path / "analysis.txt"
    log = AnalysisLog(path)
    assert log.read_new() == []  # torch_xla has not compiled yet: no file
    half = SYNC_BLOCK.index("Compilation Analysis: -----")
    path.write_text(BLOCK + SYNC_BLOCK[:half])
    assert [block.graph_hash[:6] for block in log.read_new()] == ["afca10"]
    with path.open("a") as file:
        file.write(SYNC_BLOCK[half:])
    assert [block.graph_hash[:6] for block in log.read_new()] == ["511d87"]
    assert log.read_new() == []
