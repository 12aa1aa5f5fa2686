"""Interrupts while a run is followed: counted in the main thread, the previous handler back afterwards."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tpu_nb.kernel.notebook.interrupts import interrupts_counted


def interrupt_this_process() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # Python runs the handler between two bytecodes of the main thread: here, in the sleep


def test_in_the_main_thread_interrupts_are_counted_and_raise_again_afterwards() -> None:
    with interrupts_counted() as interrupts:
        interrupt_this_process()
        interrupt_this_process()
        assert interrupts.take() == 2
        assert interrupts.take() == 0
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt):
        interrupt_this_process()


def test_a_handler_of_someone_elses_is_left_alone() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with interrupts_counted() as interrupts:
            interrupt_this_process()
        assert seen == [signal.SIGINT] and interrupts.take() == 0
    finally:
        signal.signal(signal.SIGINT, previous)


def test_another_thread_changes_nothing() -> None:
    handlers = []

    def follow() -> None:
        with interrupts_counted():
            handlers.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=follow)
    thread.start()
    thread.join()
    assert handlers == [signal.default_int_handler]
