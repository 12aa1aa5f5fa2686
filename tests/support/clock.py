"""A clock the tests move by hand, and the machine's time zone set for a test."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


BERLIN = "CET-1CEST,M3.5.0,M10.5.0/3"
"""Berlin's zone as TZ spells it without a zone database: CET, and CEST from March's last Sunday to October's."""


@contextmanager
def machine_zone(zone: str) -> Iterator[None]:
    """This process's local zone is `zone` (TZ's spelling) inside; the one before after."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = zone
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()
