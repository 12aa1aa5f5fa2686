"""Local paths, file:// URLs (on this machine's disk) and other URLs (off it)."""

from __future__ import annotations

import pytest

from tpu_nb.basics.locations import is_remote, is_url, local_path


@pytest.mark.parametrize(
    ("location", "url", "remote"),
    [
        ("/content/drive/MyDrive/run", False, False),
        ("runs/a://b", False, False),  # a relative path that happens to hold "://"
        ("file:///tmp/bucket", True, False),
        ("gs://bucket/run", True, True),
        ("memory://bucket/run", True, True),
        ("gcs+x.y-z://bucket", True, True),
    ],
)
def test_a_url_other_than_file_is_remote(location: str, url: bool, remote: bool) -> None:
    assert (is_url(location), is_remote(location)) == (url, remote)


def test_a_file_url_names_a_path_on_this_machine() -> None:
    assert local_path("file:///tmp/bucket/run") == "/tmp/bucket/run"
    assert local_path("/tmp/bucket/run") == "/tmp/bucket/run"
