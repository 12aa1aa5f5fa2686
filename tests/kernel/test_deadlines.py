"""A run's deadline: the user's, or Kaggle's session end; the stop early enough for the last save."""

from __future__ import annotations

import dataclasses
import datetime

import pytest
from support.platforms import MakeSystem

from tpu_nb.kernel.deadlines import Deadline, deadline_for
from tpu_nb.kernel.errors import LaunchRefused
from tpu_nb.runtime import detect

NOW = datetime.datetime(2026, 12, 1, 20, 30, 0).timestamp()


def test_a_deadline_is_the_users_or_on_kaggles_tpu_the_sessions_end(make_system: MakeSystem) -> None:
    mine = deadline_for("8h30m", None, now=NOW)
    assert mine is not None and mine.at == NOW + 8.5 * 3600 and not mine.session_end
    clock = deadline_for("21:00", None, now=NOW)
    assert clock is not None and datetime.datetime.fromtimestamp(clock.at) == datetime.datetime(2026, 12, 1, 21, 0)
    with pytest.raises(LaunchRefused, match="--deadline soon: give a duration such as 90s"):
        deadline_for("soon", None, now=NOW)
    kaggle = dataclasses.replace(detect(make_system("kaggle_v5e_8")), started_at=NOW - 3600)
    session = deadline_for(None, kaggle, now=NOW)
    assert session is not None and session.session_end and session.at == NOW + 8 * 3600
    assert deadline_for("1h", kaggle, now=NOW) == Deadline(NOW + 3600, session_end=False)  # the user's wins
    colab = dataclasses.replace(detect(make_system("colab_v5e_1")), started_at=NOW - 3600)
    assert deadline_for(None, colab, now=NOW) is None  # Colab says nothing of its end
    assert deadline_for(None, dataclasses.replace(kaggle, started_at=None), now=NOW) is None


def test_the_stop_comes_early_enough_for_the_last_save_and_says_when() -> None:
    deadline = Deadline(NOW + 9 * 3600, session_end=True)
    assert deadline.stop_at(None, NOW) == deadline.at - 600  # nothing measured yet: ten minutes
    assert deadline.stop_at(5.0, NOW) == deadline.at - 60  # a quick save: a minute
    assert deadline.stop_at(100.0, NOW) == deadline.at - 300  # three times the longest save
    short = Deadline(NOW + 30, session_end=False)
    assert short.stop_at(None, NOW) == NOW + 24  # a short run keeps at most a fifth of its time for the save
    said = deadline.describe(5.0, NOW, saves=True)
    end = datetime.datetime.fromtimestamp(deadline.at).strftime("%H:%M:%S")
    stop = datetime.datetime.fromtimestamp(deadline.at - 60).strftime("%H:%M:%S")
    assert said == f"Kaggle ends this session at {end}; tpu_nb saves and stops at {stop} (--deadline to choose)"
    said_without = short.describe(None, NOW, saves=False)
    assert said_without.startswith("deadline ") and said_without.endswith("(add --checkpoint DIR to save it then)")
