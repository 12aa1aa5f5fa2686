"""The warning every room of tpu_nb may raise, on the floor below them all (stdlib only); `tpu_nb.TpuNbWarning` re-exports it.

Here rather than in the package's face (`tpu_nb/__init__.py`), so that no
room imports the face, which imports every room, back up to raise it.
"""

from __future__ import annotations


class TpuNbWarning(UserWarning):
    """Warnings tpu_nb itself emits (the test suite turns them into errors)."""
