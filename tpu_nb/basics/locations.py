"""Where a run's files go: a local path, or a URL that fsspec opens (gs://BUCKET/PATH, file:///PATH, memory://...).

The kernel and the workers ask two questions of a location: is it a URL, so
that its files go through fsspec (`is_url`: a pod's run directory, whose
file:// stands in for gs:// in tests), and is it off this machine, so that
files are written locally first and copied there (`is_remote`: a URL other
than file://, whose files are on this machine's disk, at `local_path`).
"""

from __future__ import annotations

import re

_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://")
FILE_SCHEME = "file://"


def is_url(location: str) -> bool:
    """A URL (gs://..., file://...) rather than a local path."""
    return _SCHEME.match(location) is not None


def is_remote(location: str) -> bool:
    """A URL whose files are not on this machine's disk: any scheme but file://."""
    return is_url(location) and not location.startswith(FILE_SCHEME)


def local_path(location: str) -> str:
    """The path on this machine a local path or a file:// URL names."""
    return location.removeprefix(FILE_SCHEME)
