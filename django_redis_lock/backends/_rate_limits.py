"""Rate limits in a backend: what one admission asks and answers, and the primitives.

A rate limit admits hits, each of a weight (``cost``), as long as every one of its rates has
room: the hits admitted in any window of a rate's period, on the backend's clock, never weigh
more than its limit. Nothing is held and nothing released: a hit counts until a period has
passed since it was admitted.

Each rate keeps the hits of its window in *buckets* of at most :attr:`Rate.granule_us` (a 64th
of the period, 1 ms at least): a bucket records the total weight of its hits and the time of the
latest (to the microsecond, the server clock's precision), and leaves the window a period after
that one. Counting a bucket's hits until its
latest leaves is never too few (a window never holds more than the limit), and admits a slot at
most one granule late: at least 64/65 of the limit per period under saturation. A key holds at
most 65 buckets of a rate in its window, whatever its limit (and, on Redis, a base: the bucket
that left the window last, which the running totals of ``rate.lua`` are counted from).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from asgiref.sync import sync_to_async

__all__ = ["Admission", "Rate", "RateLimitInfo", "RateLimitPrimitives"]

#: How many buckets a period is cut into, at most (see the module's docstring).
BUCKETS_PER_PERIOD = 64


@dataclass(frozen=True, slots=True)
class Rate:
    """``limit`` hits (of weight 1) in any window of ``period`` seconds."""

    limit: int
    period: float

    @property
    def period_ms(self) -> int:
        """Return the period in whole milliseconds, as the backends count it."""
        return round(self.period * 1000)

    @property
    def period_us(self) -> int:
        """Return the period in microseconds, as the backends count time."""
        return self.period_ms * 1000

    @property
    def granule_us(self) -> int:
        """Return the widest a bucket of hits may be, in microseconds."""
        return max(1000, self.period_us // BUCKETS_PER_PERIOD)

    def __str__(self) -> str:
        for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
            if self.period == seconds:
                return f"{self.limit}/{unit}"
            if self.period % seconds == 0:
                return f"{self.limit}/{int(self.period // seconds)}{unit}"
        return f"{self.limit}/{self.period:g}s"


@dataclass(frozen=True, slots=True)
class Admission:
    """What one hit was told: admitted, or how long until it would be.

    ``retry_after`` is 0 for an admitted hit, else the seconds until every rate has room for
    it (no other hit taking that room first). ``at`` is the backend's clock, in seconds, when
    the hit was admitted (None when refused). ``rate`` is the rate that refused it.
    """

    admitted: bool
    retry_after: float = 0.0
    at: float | None = None
    rate: Rate | None = None


@dataclass(frozen=True, slots=True)
class RateLimitInfo:
    """One rate of one rate limit, as listed: how much of its window is used.

    ``used`` is the weight of the hits in the window now; ``free_in`` the seconds until one
    more hit of weight 1 would be admitted (0: now).
    """

    name: str
    rate: Rate
    used: int
    free_in: float


class RateLimitPrimitives:
    """The rate-limit primitives of a backend; :class:`BaseLockBackend` has them."""

    def admit(self, name: str, rates: Sequence[Rate], cost: int = 1) -> Admission:
        """Admit one hit of weight ``cost`` to rate limit ``name`` if each of ``rates`` has room.

        Atomic: the hit is counted against every rate, or against none. The rates have
        different periods; ``cost`` is at most each one's limit.
        """
        raise NotImplementedError("subclasses of BaseLockBackend must provide an admit() method")

    async def aadmit(self, name: str, rates: Sequence[Rate], cost: int = 1) -> Admission:
        """Do what :meth:`admit` does, without blocking the event loop."""
        return await sync_to_async(self.admit, thread_sensitive=False)(name, rates, cost)

    def schedule_retry(self, name: str, rate: Rate, not_before: float) -> float:
        """Return in how many seconds a hit that ``rate`` refused should be tried again.

        No sooner than ``not_before`` seconds from now (when a slot frees), and at least
        ``rate.period / rate.limit`` after the moment given to the previous call for this
        rate: the retries of one rate limit are spaced so that at most its limit of them is
        scheduled per period, instead of all coming back when the first slot frees.
        """
        raise NotImplementedError(
            "subclasses of BaseLockBackend must provide a schedule_retry() method"
        )

    def iter_rate_limits(self, pattern: str = "*") -> Iterator[RateLimitInfo]:
        """Yield each rate of each rate limit whose name matches the glob ``pattern``.

        Only rate limits with hits in a window are kept, so only they are listed.
        """
        return iter(())
