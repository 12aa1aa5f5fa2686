from __future__ import annotations

from tpu_nb.kernel.options import LaunchOptions


def test_default_options_have_no_problems() -> None:
    assert LaunchOptions().problems() == []


def test_each_bad_option_is_named_with_its_fix() -> None:
    problems = LaunchOptions(cores=0, timeout=-1).problems()
    assert problems == [
        "cores=0: give a positive number of XLA devices, or leave it out to use all.",
        "timeout=-1: give a positive number of seconds, or leave it out for no limit.",
    ]


def test_a_stop_grace_that_is_not_positive_is_named() -> None:
    assert LaunchOptions(stop_grace=0).problems() == ["stop_grace=0: give a positive number of seconds."]
