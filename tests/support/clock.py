"""Clocks a test passes time on: the real one, or one LocMem reads that moves only when told.

``LocMemBackend`` reads every time through its module's ``time`` attribute (as redis-py's lock
reads ``mod_time``), so a test can put a :class:`ManualClock` there: leases and ``min_hold``
windows then end when the test says, without sleeping. Redis, Cluster and Redlock keep leases
on the server's clock: there a test really waits (:class:`RealClock`).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """What a test reads and passes: the backend's monotonic time."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class RealClock:
    """The real clock: sleeping waits."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class ManualClock:
    """A clock that stands still until :meth:`sleep` moves it (at once, for every thread).

    It serves what LocMem reads of the ``time`` module: ``monotonic``, ``time`` and ``time_ns``.
    """

    def __init__(self) -> None:
        self._monotonic = time.monotonic()
        self._wall = time.time()

    def monotonic(self) -> float:
        return self._monotonic

    def time(self) -> float:
        return self._wall

    def time_ns(self) -> int:
        return int(self._wall * 1e9)

    def sleep(self, seconds: float) -> None:
        self._monotonic += seconds
        self._wall += seconds
