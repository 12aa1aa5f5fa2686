"""Small files (a result's index, a worker's exception, the supervisor's report, a sweep's record) written whole or not at all.

The kernel reads them once the workers are gone, and a worker killed
mid-write must leave no half file that reads as one: each is written beside
its place as `NAME.partial` and renamed over it (a rename is atomic). The
data reaches the disk before the rename and the rename after it, so a
machine that goes down meanwhile leaves the old file or the new one, never
an empty one; a write that fails (a full disk) removes its partial file.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

PARTIAL = ".partial"


def write_atomically(path: Path, data: bytes) -> None:
    """Put `data` in `path` whole, or leave `path` as it was and raise what failed (no partial file left behind)."""
    partial = path.with_name(path.name + PARTIAL)  # not with_suffix: a.json and a.txt would share a.partial
    try:
        with partial.open("wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (a filesystem that cannot sync a directory says EINVAL: nothing more to do)."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
    finally:
        os.close(descriptor)
