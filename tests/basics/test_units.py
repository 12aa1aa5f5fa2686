"""Durations, sizes and deadlines read from options, and durations written back."""

from __future__ import annotations

import datetime

import pytest
from support.clock import BERLIN, machine_zone

from tpu_nb.basics.units import UnitError, format_bytes, format_duration, parse_deadline, parse_duration, parse_size

NOW = datetime.datetime(2026, 12, 1, 20, 30, 0)


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


@machine_zone("UTC")
def test_a_deadline_is_a_duration_or_a_clock_time_today_or_tomorrow_in_a_zone() -> None:
    utc = datetime.timezone.utc
    now = NOW.replace(tzinfo=utc)  # 20:30 UTC, as on Colab and Kaggle
    assert parse_deadline("8h30m", now) == now + datetime.timedelta(hours=8, minutes=30)
    assert parse_deadline("21:00", now) == datetime.datetime(2026, 12, 1, 21, 0, tzinfo=utc)  # the machine's zone
    assert parse_deadline("20:00", now) == datetime.datetime(2026, 12, 2, 20, 0, tzinfo=utc)  # passed today: tomorrow's
    berlin = datetime.timezone(datetime.timedelta(hours=2))
    # 21:00 at +02:00 is 19:00 UTC, passed at 20:30 UTC: tomorrow's, in the zone it names.
    assert parse_deadline("21:00+02:00", now) == datetime.datetime(2026, 12, 2, 21, 0, tzinfo=berlin)
    assert parse_deadline("23:00 +0200", now) == datetime.datetime(2026, 12, 1, 21, 0, tzinfo=utc)
    assert parse_deadline("21:00 UTC", now.astimezone(berlin)) == datetime.datetime(2026, 12, 1, 21, 0, tzinfo=utc)
    assert parse_deadline("21:00Z", now) == parse_deadline("21:00 utc", now)
    for bad in ("25:00", "tonight", "21:00+15:00", "21:00 CET", "99999999h", "1" * 400, "400d"):
        with pytest.raises(UnitError, match="--deadline"):
            parse_deadline(bad, now)


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


@machine_zone(BERLIN)
def test_a_clock_time_without_a_zone_takes_the_offset_in_force_on_its_own_day() -> None:
    cet, cest = (datetime.timezone(datetime.timedelta(hours=hours)) for hours in (1, 2))
    saturday = datetime.datetime(2026, 3, 28, 20, 30, tzinfo=cet)  # the clocks go forward at 02:00 on Sunday
    assert parse_deadline("21:00", saturday) == datetime.datetime(2026, 3, 28, 21, 0, tzinfo=cet)
    # Passed today: tomorrow's 20:00 is summer time, 18:00 UTC (today's offset made it 19:00 UTC, an hour late).
    assert parse_deadline("20:00", saturday) == datetime.datetime(2026, 3, 29, 20, 0, tzinfo=cest)
    night = datetime.datetime(2026, 3, 29, 1, 30, tzinfo=cet)  # half an hour before the change
    assert parse_deadline("09:00", night) == datetime.datetime(2026, 3, 29, 9, 0, tzinfo=cest)
    autumn = datetime.datetime(2026, 10, 24, 22, 0, tzinfo=cest)  # back to winter time at 03:00 on Sunday
    assert parse_deadline("21:00", autumn) == datetime.datetime(2026, 10, 25, 21, 0, tzinfo=cet)
    assert parse_deadline("21:00+02:00", autumn) == datetime.datetime(2026, 10, 25, 21, 0, tzinfo=cest)  # a zone named stays
    assert parse_deadline("8h", autumn) == autumn + datetime.timedelta(hours=8)  # a duration is elapsed time
