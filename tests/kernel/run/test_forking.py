"""tpu_nb's own fork hides Python 3.12+'s multi-threaded-fork warning and nothing else (simulated: Python 3.11 here)."""

from __future__ import annotations

import os
import warnings

import pytest
from support.forks import fork_that_warns

import tpu_nb
from tpu_nb.kernel.run import forking


def fake_fork(pid: int) -> object:
    def fork() -> int:
        warnings.warn("something else went on meanwhile", UserWarning, stacklevel=2)
        return pid

    return fork_that_warns(fork)


def test_the_fork_warning_is_recognised() -> None:
    assert forking.is_fork_warning(
        DeprecationWarning("This process (pid=4242) is multi-threaded, use of fork() may lead to deadlocks in the child.")
    )
    assert not forking.is_fork_warning(
        DeprecationWarning("This process (pid=4242) is multi-threaded, use of forkpty() may lead to deadlocks in the child.")
    )
    assert not forking.is_fork_warning(
        UserWarning("This process (pid=4242) is multi-threaded, use of fork() may lead to deadlocks in the child.")
    )


def test_the_parent_sees_only_the_other_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fork", fake_fork(4242))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert forking.fork() == 4242
    assert [(warning.category, str(warning.message)) for warning in seen] == [(UserWarning, "something else went on meanwhile")]


def test_the_child_reissues_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fork", fake_fork(0))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert forking.fork() == 0
    assert seen == []


def test_a_launch_on_python_3_12_warns_about_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fork", fork_that_warns(os.fork))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning that reaches the user fails the launch
        assert tpu_nb.launch(sum, [20, 22], progress=False) == 42
