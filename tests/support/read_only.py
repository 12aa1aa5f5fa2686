"""A directory the system refuses to write in, for in-process tests: as on a read-only mount (we run as root, so chmod
cannot make one)."""

from __future__ import annotations

import builtins
import errno
import io
import os
from pathlib import Path
from typing import Any

import pytest

WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT


def refuse_writes_in(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening a file for writing under `directory` (os.open, open, Path.write_*) raises EROFS, as on a read-only mount."""
    inside = str(directory.resolve())
    real_os_open, real_open = os.open, io.open

    def there(path: Any) -> bool:
        return isinstance(path, str | bytes | os.PathLike) and os.path.abspath(os.fsdecode(path)).startswith(inside)

    def refused(path: Any) -> OSError:
        return OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))

    def os_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if flags & WRITING and there(path):
            raise refused(path)
        return real_os_open(path, flags, mode, dir_fd=dir_fd)

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(letter in mode for letter in "wax+") and there(file):
            raise refused(file)
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(io, "open", open_)
    monkeypatch.setattr(builtins, "open", open_)
