"""A run's small files (a result's index, a worker's exception, the supervisor's report) written whole or not at all.

The kernel reads them once the workers are gone, and a worker killed
mid-write must leave no half file that reads as one: each is written beside
its place as `NAME.partial` and renamed over it (a rename is atomic).
"""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    partial = path.with_suffix(".partial")
    partial.write_bytes(data)
    os.replace(partial, path)
