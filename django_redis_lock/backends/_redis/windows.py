"""Rate limits on Redis: one script (``lua/rate.lua``) per admission, one list per rate.

A rate limit's keys carry the hash tag ``{=name}``, as a lock's do, so every rate of one rate
limit is in one Redis Cluster slot and one script admits a hit to all of them at once:
``<prefix>:{=name}:r:<period ms>``, a list. Listing finds them with ``SCAN`` (never ``KEYS``).
A task's retries are spaced by ``lua/retry.lua`` on ``<that key>:next``, a string.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import redis.asyncio

from .._rate_limits import Admission, Rate, RateLimitInfo
from ..base import glob_escape
from .keys import RedisKeyspace
from .loops import PerLoop
from .scripts import Scripts

__all__ = ["RedisRateLimits"]

_RATE = "}:r:"

#: How many keys listing reads in one round trip.
PAGE = 500


class RedisRateLimits(RedisKeyspace):
    """Rate limits on the backend's Redis, through ``lua/rate.lua``."""

    _scripts: Scripts
    _async_clients: PerLoop[redis.asyncio.Redis]

    def rate_keys(self, name: str, rates: Sequence[Rate]) -> list[str]:
        """Return the keys of ``rates`` of rate limit ``name``: one list per rate."""
        return [f"{self.key_prefix}:{{={name}{_RATE}{rate.period_ms}" for rate in rates]

    def admit(self, name: str, rates: Sequence[Rate], cost: int = 1) -> Admission:
        args = _admit_args(rates, cost)
        with self._errors(name):
            reply = self._scripts.run(
                self.client.execute_command, "rate", self.rate_keys(name, rates), args
            )
        return _admission(reply, rates)

    async def aadmit(self, name: str, rates: Sequence[Rate], cost: int = 1) -> Admission:
        client = await self._async_clients.get()
        args = _admit_args(rates, cost)
        with self._errors(name):
            reply = await self._scripts.arun(
                client.execute_command, "rate", self.rate_keys(name, rates), args
            )
        return _admission(reply, rates)

    def schedule_retry(self, name: str, rate: Rate, not_before: float) -> float:
        (key,) = self.rate_keys(name, [rate])
        args = [round(not_before * 1e6), rate.period_us // rate.limit, rate.period_ms]
        with self._errors(name):
            reply = self._scripts.run(self.client.execute_command, "retry", key + ":next", args)
        return int(reply) / 1e6

    def iter_rate_limits(self, pattern: str = "*") -> Iterator[RateLimitInfo]:
        # A page of keys at a time, as SCAN finds them: the listing of a keyspace with
        # millions of rate limits starts at once and holds one page in memory.
        match = f"{glob_escape(self.key_prefix)}:{{={pattern}{_RATE}*"
        with self._errors(None):
            page: list[str] = []
            for key in self.client.scan_iter(match=match, count=PAGE, _type="list"):
                page.append(key.decode() if isinstance(key, bytes) else key)
                if len(page) == PAGE:
                    yield from self._read_rates(page)
                    page = []
            if page:
                yield from self._read_rates(page)

    def _read_rates(self, keys: list[str]) -> Iterator[RateLimitInfo]:
        # Each list with the clock of the server that keeps it (rate_read.lua), in one pipeline.
        self._scripts.load(self.client, "rate_read")
        replies = self._scripts.run_many(self.client, "rate_read", [(key, []) for key in keys])
        for key, reply in zip(keys, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            name, _, period = key[len(self.key_prefix) + 3 :].rpartition(_RATE)
            seconds, micros, *entries = reply
            if entries and period.isdigit():
                now = int(seconds) * 1_000_000 + int(micros)
                info = _info(name, int(period) * 1000, [_entry(e) for e in entries], now)
                if info.used:  # not a rate whose hits have all left, but whose key lives on
                    yield info


def _admit_args(rates: Sequence[Rate], cost: int) -> list[int]:
    # rate.lua's ARGV: the weight, then each rate's limit, period and granule.
    args = [cost]
    for rate in rates:
        args += [rate.limit, rate.period_us, rate.granule_us]
    return args


def _admission(reply: list[Any], rates: Sequence[Rate]) -> Admission:
    if reply[0] == 1:
        return Admission(True, at=int(reply[1]) + int(reply[2]) / 1_000_000)
    return Admission(False, retry_after=int(reply[1]) / 1e6, rate=rates[int(reply[2]) - 1])


def _entry(entry: bytes) -> tuple[int, int, int]:
    latest, total, limit = entry.split(b" ")
    return int(latest), int(total), int(limit)


def _info(
    name: str, period_us: int, entries: list[tuple[int, int, int]], now: int
) -> RateLimitInfo:
    """Return how much of a rate's window is used at ``now`` (us), from its list (rate.lua)."""
    live = [entry for entry in entries[1:] if entry[0] + period_us > now]
    left = [entry for entry in entries if entry[0] + period_us <= now]
    base = left[-1][1] if left else entries[0][1]
    limit, top = entries[-1][2], entries[-1][1]
    used = top - base if live else 0
    free_in = 0.0
    if used + 1 > limit:
        needed = top + 1 - limit
        first = next(entry for entry in live if entry[1] >= needed)
        free_in = (first[0] + period_us - now) / 1e6
    return RateLimitInfo(name, Rate(limit, period_us / 1e6), used, free_in)
