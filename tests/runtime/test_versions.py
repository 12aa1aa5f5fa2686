"""Version policy: build tags, matching torch / torch_xla lines, libtpu, install commands."""

from __future__ import annotations

import pytest

from tpu_nb.runtime import TpuInfo, Versions
from tpu_nb.runtime.versions import expected_libtpu, has_matching_xla, install_command, libtpu_matches, release, same_release

V5E = TpuInfo("v5e", "v5litepod-8", 8, 1, ())


def versions(torch: str | None, torch_xla: str | None) -> Versions:
    return Versions("3.11.7", torch, torch_xla, None, None)


@pytest.mark.parametrize(
    ("found", "wanted", "same"),
    [("2.9.0+cpu", "2.9.0", True), ("2.9.0", "2.9.0+tpu", True), ("2.8.0", "2.9.0", False), (None, "2.9.0", False)],
)
def test_a_local_build_tag_names_the_same_release(found: str | None, wanted: str, same: bool) -> None:
    assert same_release(found, wanted) is same
    assert release("2.5.1+cu121") == "2.5.1"


def test_torch_xla_matches_the_torch_of_its_line() -> None:
    assert has_matching_xla(versions("2.9.0+cpu", "2.9.0")) and has_matching_xla(versions("2.5.1", "2.5.0"))
    assert not has_matching_xla(versions("2.13.0", "2.9.0")) and not has_matching_xla(versions("2.9.0", None))


def test_libtpu_of_the_torch_xla_line() -> None:
    assert expected_libtpu("2.8.0") == "0.0.17" and expected_libtpu("2.9.0+tpu") == "0.0.21" and expected_libtpu("2.7.0") is None
    assert libtpu_matches("0.0.21.1", "0.0.21") and not libtpu_matches("0.0.17", "0.0.21")


def test_install_commands_install_nothing_an_image_has() -> None:
    assert install_command(V5E, versions("2.9.0+cpu", "2.9.0")) == "pip install tpu_nb"  # Colab: tpu_nb alone
    assert install_command(None, versions(None, None)) == "pip install 'tpu_nb[xla]'"
    assert install_command(V5E, versions("2.8.0", None)) == "pip install 'torch_xla[tpu]~=2.8.0' tpu_nb"  # the image's torch kept
    assert install_command(V5E, versions(None, None)) == "pip install torch==2.9.0 'torch_xla[tpu]==2.9.0' tpu_nb"
