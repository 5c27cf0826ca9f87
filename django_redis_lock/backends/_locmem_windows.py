"""Rate limits in one process's memory, for :class:`~.locmem.LocMemBackend`.

The same buckets as on Redis (``_redis/lua/rate.lua``, described in ``_rate_limits.py``), kept in a
dict on the clock LocMem reads; the caller holds LocMem's lock around every call.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ._glob import glob_to_regex
from ._rate_limits import Admission, Rate, RateLimitInfo

__all__ = ["RateWindows"]

#: How often, at most, idle rate limits are swept away (us).
SWEEP_EVERY_US = 1_000_000


@dataclass
class _Window:
    """One rate's buckets: ``[latest hit us, weight]``, oldest first, all in the window."""

    limit: int
    buckets: deque[list[int]] = field(default_factory=deque)

    def drop_left(self, period_us: int, now: int) -> None:
        while self.buckets and self.buckets[0][0] + period_us <= now:
            self.buckets.popleft()

    def used(self) -> int:
        return sum(weight for _, weight in self.buckets)

    def free_in(self, cost: int, period_us: int, now: int) -> int:
        """Return the us until the window has room for ``cost`` (0: now)."""
        excess = self.used() + cost - self.limit
        for latest, weight in self.buckets:
            if excess <= 0:
                break
            excess -= weight
            if excess <= 0:
                return latest + period_us - now
        return 0


class RateWindows:
    """Every rate limit's windows, by name and period (us)."""

    def __init__(self) -> None:
        self._windows: dict[str, dict[int, _Window]] = {}
        self._next_retry: dict[tuple[str, int], int] = {}
        self._sweeps_at = 0

    def schedule_retry(self, name: str, rate: Rate, not_before: int, now: int) -> int:
        """Return the us from ``now`` until a refused hit's retry (see ``lua/retry.lua``)."""
        self._sweep(now)
        key = (name, rate.period_us)
        at = max(now + not_before, self._next_retry.get(key, 0))
        self._next_retry[key] = at + rate.period_us // rate.limit
        return at - now

    def admit(self, name: str, rates: Sequence[Rate], cost: int, now: int) -> Admission:
        """Admit a hit of weight ``cost`` at ``now`` (us) if every rate has room."""
        self._sweep(now)
        windows = self._windows.setdefault(name, {})
        wait, waiting = 0, rates[0]
        for rate in rates:
            window = windows.setdefault(rate.period_us, _Window(rate.limit))
            window.limit = rate.limit
            window.drop_left(rate.period_us, now)
            free_in = window.free_in(cost, rate.period_us, now)
            if free_in > wait:
                wait, waiting = free_in, rate
        if wait > 0:
            self._tidy(name)
            return Admission(False, retry_after=wait / 1e6, rate=waiting)
        for rate in rates:
            buckets = windows[rate.period_us].buckets
            latest = max(now, buckets[-1][0]) if buckets else now
            if buckets and buckets[-1][0] // rate.granule_us == latest // rate.granule_us:
                buckets[-1] = [latest, buckets[-1][1] + cost]
            else:
                buckets.append([latest, cost])
        return Admission(True)

    def infos(self, pattern: str, now: int) -> Iterator[RateLimitInfo]:
        """Yield each rate of each rate limit whose name matches ``pattern``, at ``now``."""
        regex = glob_to_regex(pattern)
        for name in list(self._windows):
            for period_us, window in self._windows[name].items():
                window.drop_left(period_us, now)
                if window.buckets and regex.match(name):
                    free_in = window.free_in(1, period_us, now) / 1e6
                    rate = Rate(window.limit, period_us / 1e6)
                    yield RateLimitInfo(name, rate, window.used(), free_in)
            self._tidy(name)

    def _sweep(self, now: int) -> None:
        # Once a second, whatever is kept of every rate limit idle a period is dropped, as a
        # key expires on Redis: names that come and go (one per user, say) never pile up.
        if now < self._sweeps_at:
            return
        self._sweeps_at = now + SWEEP_EVERY_US
        for name in list(self._windows):
            for period_us, window in self._windows[name].items():
                window.drop_left(period_us, now)
            self._tidy(name)
        for old in [k for k, moment in self._next_retry.items() if moment + k[1] < now]:
            del self._next_retry[old]

    def _tidy(self, name: str) -> None:
        # Nothing is kept of a rate limit whose windows are all empty.
        windows = self._windows[name]
        for period_us in [p for p, window in windows.items() if not window.buckets]:
            del windows[period_us]
        if not windows:
            del self._windows[name]
