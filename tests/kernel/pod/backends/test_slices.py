from __future__ import annotations

import pytest

from tpu_nb.kernel.pod.backends.slices import SliceError, TpuSlice, parse_slice


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("v5litepod-16", TpuSlice("v5litepod-16", "v5e", 16, 4, 4, "tpu-v5-lite-podslice", "4x4")),
        ("v4-32", TpuSlice("v4-32", "v4", 16, 4, 4, "tpu-v4-podslice", "2x2x4")),
        ("v4-8", TpuSlice("v4-8", "v4", 4, 1, 4, "tpu-v4-podslice", "2x2x1")),
        ("v5p-128", TpuSlice("v5p-128", "v5p", 64, 16, 4, "tpu-v5p-slice", "4x4x4")),
        ("v5p-1024", TpuSlice("v5p-1024", "v5p", 512, 128, 4, "tpu-v5p-slice", "8x8x8")),
        ("v6e-256", TpuSlice("v6e-256", "v6e", 256, 64, 4, "tpu-v6e-slice", "16x16")),
        ("v6e-4", TpuSlice("v6e-4", "v6e", 4, 1, 4, "tpu-v6e-slice", "2x2")),
        ("v5litepod-1", TpuSlice("v5litepod-1", "v5e", 1, 1, 1, "tpu-v5-lite-podslice", "1x1")),
        ("v5litepod-128", TpuSlice("v5litepod-128", "v5e", 128, 32, 4, "tpu-v5-lite-podslice", "8x16")),
    ],
)
def test_cloud_tpu_names_give_their_documented_shape(name: str, expected: TpuSlice) -> None:
    assert parse_slice(name) == expected


def test_v5e_is_an_alias_named_as_cloud_tpu_names_it() -> None:
    tpu = parse_slice("v5e-8")
    assert tpu == TpuSlice("v5litepod-8", "v5e", 8, 1, 8, "tpu-v5-lite-podslice", "2x4")
    assert not tpu.multi_host


def test_only_slices_of_more_than_one_host_are_multi_host() -> None:
    assert parse_slice("v5litepod-16").multi_host
    assert parse_slice("v4-16").multi_host
    assert not parse_slice("v4-8").multi_host
    assert not parse_slice("v6e-8").multi_host


def test_surrounding_space_and_capitals_are_forgiven() -> None:
    assert parse_slice(" V4-32\n") == parse_slice("v4-32")


@pytest.mark.parametrize("name", ["v3-8", "v5litepod", "tpu", "", "v4-32x", "v4--32", "-16", "v4-", "v4-٣٢"])
def test_unknown_names_list_the_accepted_forms(name: str) -> None:
    with pytest.raises(SliceError, match=r"give a Cloud TPU accelerator type.*v4-N or v5p-N.*e\.g\. v5litepod-16, v4-32"):
        parse_slice(name)


@pytest.mark.parametrize(
    ("name", "sizes"),
    [
        ("v4-33", "v4-8, v4-16, v4-32, v4-64, v4-128, v4-256, v4-512, v4-1024"),
        ("v4-4", "v4-8, v4-16"),
        ("v5p-2048", "v5p-8, v5p-16"),
        ("v5e-12", "v5litepod-1, v5litepod-4, v5litepod-8, v5litepod-16"),
        ("v6e-512", "v6e-1, v6e-4, v6e-8, v6e-16, v6e-32, v6e-64, v6e-128, v6e-256"),
    ],
)
def test_a_size_not_in_the_table_names_the_sizes_there_are(name: str, sizes: str) -> None:
    with pytest.raises(SliceError, match=f"is not a .* slice size: use one of {sizes}"):
        parse_slice(name)


def test_an_odd_number_of_tensorcores_is_refused_for_two_core_chips() -> None:
    with pytest.raises(SliceError, match="'v5p-17' is not a v5p slice size"):
        parse_slice("v5p-17")


def test_the_error_is_a_value_error() -> None:
    assert issubclass(SliceError, ValueError)
