"""Durations and sizes read from options, and written back."""

from __future__ import annotations

import pytest

from tpu_nb.basics.units import UnitError, format_bytes, format_duration, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("2.5", 2.5), ("90s", 90.0), ("15m", 900.0), ("15 min", 900.0), ("8h30m", 30600.0), ("1h30m15s", 5415.0)],
)
def test_a_duration_is_seconds_or_hours_minutes_and_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text, "--every") == seconds


@pytest.mark.parametrize(
    ("text", "said"),
    [("soon", "give a duration such as 90s"), ("", "give a duration such as 90s"), ("0m", "give a duration longer than zero")],
)
def test_a_bad_duration_names_the_option_and_what_to_give(text: str, said: str) -> None:
    with pytest.raises(UnitError, match=f"--watchdog {text}: {said}"):
        parse_duration(text, "--watchdog")


@pytest.mark.parametrize(
    ("text", "size"), [("1000", 1000), ("500MB", 500 * 10**6), ("2.5 GB", 2_500_000_000), ("2GiB", 2 * 2**30), ("7b", 7)]
)
def test_a_size_is_bytes_in_decimal_or_binary_units(text: str, size: int) -> None:
    assert parse_size(text, "--budget") == size


@pytest.mark.parametrize("text", ["a lot", "0GB", "15 gigs", "-1GB"])
def test_a_bad_size_says_what_to_give(text: str) -> None:
    with pytest.raises(UnitError, match=f"--budget {text}: give a size such as 500MB or 15GB"):
        parse_size(text, "--budget")


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0, "0s"),
        (0.04, "0s"),
        (0.4, "0.4s"),
        (5.0, "5s"),
        (8.53, "8.5s"),
        (9.97, "10s"),
        (42, "42s"),
        (59.6, "1m00s"),
        (122, "2m02s"),
        (5430, "1h30m"),
    ],
)
def test_a_duration_is_written_to_a_tenth_under_ten_seconds_then_in_seconds_then_minutes(seconds: float, expected: str) -> None:
    assert format_duration(seconds) == expected


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (0, "0 bytes"),
        (1023, "1023 bytes"),
        (1536, "1.5 KiB"),
        (2**20 - 1, "1.0 MiB"),
        (12_300_000, "11.7 MiB"),
        (16 * 2**30, "16.0 GiB"),
        (2**42, "4096.0 GiB"),
    ],
)
def test_a_size_is_written_in_binary_units_with_one_decimal(size: int, expected: str) -> None:
    assert format_bytes(size) == expected
