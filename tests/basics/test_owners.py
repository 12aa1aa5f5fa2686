"""An owner's name names one process of one boot and pid namespace; gone means provably gone from here."""

from __future__ import annotations

import os

from tpu_nb.basics.owners import Owner, gone, this_process


def test_this_process_is_named_and_read_back_and_is_not_gone() -> None:
    me = this_process()
    assert me is not None and me.pid == os.getpid()
    assert Owner.parse(me.name) == me
    assert not gone(me, me)
    assert Owner.parse("1234") is None and Owner.parse("") is None and Owner.parse("12-34-not-hex") is None


def test_a_reused_pid_is_gone_and_another_namespaces_pid_is_never_judged() -> None:
    me = this_process()
    assert me is not None
    assert gone(Owner(me.pid, me.started + 1, me.place), me)  # the pid runs, but it is another process
    assert not gone(Owner(2**22 - 3, 5, "0123456789ab"), me)  # dead here, and named elsewhere: left alone
