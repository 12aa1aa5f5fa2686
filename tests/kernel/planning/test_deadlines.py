"""A run's deadline: the user's, or Kaggle's session end; the stop early enough for the last save."""

from __future__ import annotations

import dataclasses
import datetime

import pytest
from support.clock import BERLIN, machine_zone
from support.platforms import MakeSystem

from tpu_nb.basics.units import UnitError
from tpu_nb.kernel.endings.notebook_errors import LaunchRefused
from tpu_nb.kernel.planning.deadlines import Deadline, StopNeeds, deadline_for, parse_deadline
from tpu_nb.runtime import detect

NOW = datetime.datetime(2026, 12, 1, 20, 30, 0).timestamp()


def test_a_deadline_is_the_users_or_on_kaggles_tpu_the_sessions_end(make_system: MakeSystem) -> None:
    mine = deadline_for("8h30m", None, now=NOW)
    assert mine is not None and mine.at == NOW + 8.5 * 3600 and not mine.session_end
    clock = deadline_for("21:00", None, now=NOW)
    assert clock is not None and datetime.datetime.fromtimestamp(clock.at) == datetime.datetime(2026, 12, 1, 21, 0)
    with pytest.raises(LaunchRefused, match="--deadline soon: give a duration such as 8h30m, or a clock time such as 21:00"):
        deadline_for("soon", None, now=NOW)
    with pytest.raises(LaunchRefused, match="more than a year away"):
        deadline_for("99999999h", None, now=NOW)
    offset = deadline_for("21:00+02:00", None, now=NOW)
    assert offset is not None and datetime.datetime.fromtimestamp(offset.at, datetime.timezone.utc).strftime("%H:%M") == "19:00"
    kaggle = dataclasses.replace(detect(make_system("kaggle_v5e_8")), started_at=NOW - 3600)
    session = deadline_for(None, kaggle, now=NOW)
    assert session is not None and session.session_end and session.at == NOW + 8 * 3600
    assert deadline_for("1h", kaggle, now=NOW) == Deadline(NOW + 3600, session_end=False)  # the user's wins
    colab = dataclasses.replace(detect(make_system("colab_v5e_1")), started_at=NOW - 3600)
    assert deadline_for(None, colab, now=NOW) is None  # Colab says nothing of its end
    assert deadline_for(None, dataclasses.replace(kaggle, started_at=None), now=NOW) is None


@machine_zone(BERLIN)
def test_a_clock_deadline_across_a_daylight_saving_change_falls_at_that_days_clock_time() -> None:
    saturday_evening = datetime.datetime(2026, 3, 28, 20, 30).timestamp()  # the clocks go forward tonight
    deadline = deadline_for("20:00", None, now=saturday_evening)
    assert deadline is not None
    # 20:00 summer time on Sunday, not 20:00 at Saturday's offset (an hour late).
    assert datetime.datetime.fromtimestamp(deadline.at, datetime.timezone.utc) == datetime.datetime(
        2026, 3, 29, 18, 0, tzinfo=datetime.timezone.utc
    )


def test_the_stop_comes_early_enough_for_the_stop_and_the_last_save_and_says_when() -> None:
    nothing = StopNeeds(None, None)
    deadline = Deadline(NOW + 9 * 3600, session_end=True)
    assert deadline.stop_at(nothing, NOW) == deadline.at - 600  # nothing measured yet: ten minutes
    assert deadline.stop_at(StopNeeds(10.0, 5.0), NOW) == deadline.at - 60  # a quick stop and save: a minute
    assert deadline.stop_at(StopNeeds(30.0, 100.0), NOW) == deadline.at - 180  # the stop's wait, 1.5 times the save
    short = Deadline(NOW + 30, session_end=False)
    assert short.stop_at(nothing, NOW) == NOW + 24  # a short run spends at most a fifth of its time on the guess
    # 8 s steps and a 60 s deadline: the stop waits up to 1.5 x 2 steps (24 s); measured needs are never cut short.
    minute = Deadline(NOW + 60, session_end=False)
    assert minute.stop_at(StopNeeds(24.0, None), NOW) == NOW + 36
    assert minute.stop_at(StopNeeds(24.0, 2.0), NOW) == NOW + 33
    said = deadline.describe(StopNeeds(10.0, 5.0), NOW, saves=True)
    end = datetime.datetime.fromtimestamp(deadline.at).astimezone().strftime("%H:%M:%S %Z")
    stop = datetime.datetime.fromtimestamp(deadline.at - 60).astimezone().strftime("%H:%M:%S %Z")
    assert said == f"Kaggle ends this session at {end}; tpu_nb saves and stops at {stop} (--deadline to choose)"
    said_without = short.describe(nothing, NOW, saves=False)
    assert said_without.startswith("deadline ") and said_without.endswith("(add --checkpoint DIR to save it then)")


@machine_zone("UTC")
def test_a_deadline_is_a_duration_or_a_clock_time_today_or_tomorrow_in_a_zone() -> None:
    utc = datetime.timezone.utc
    now = datetime.datetime(2026, 12, 1, 20, 30, tzinfo=utc)  # 20:30 UTC, as on Colab and Kaggle
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
