"""Every key a script touches is one it was given in ``KEYS``.

Redis documents that a script must be passed every key it touches; Dragonfly refuses the
others by default, and so do proxies and managed offerings that route or authorise by declared
keys. Each workload here (every lock kind, every script, the paths that wait, hand over,
withdraw and fence) runs on a real redis-server watched with ``MONITOR``: each command a script
ran is checked, with ``COMMAND GETKEYS``, against the keys of the ``EVAL``/``EVALSHA`` that ran
it (MONITOR shows a script's commands right after the call that ran them, on Redis 6.2 and 7
and on Valkey).
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis as redis_py
from django.test import override_settings

from django_redis_lock import alock, leader, lock, lock_all, locks, rate_limit, rwlock
from django_redis_lock.backends.base import AcquireRequest, Rate
from django_redis_lock.celery.beat import CLAIM
from tests.support.helpers import eventually, in_thread, locks_setting, queued

_LINE = re.compile(rb"^\d+\.\d+ \[\d+ ([^\]]+)\] (.*)$", re.DOTALL)
_ARGUMENT = re.compile(rb'"((?:[^"\\]|\\.)*)"')
_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b"}


def _unquote(text: bytes) -> bytes:
    # MONITOR quotes each argument as sdscatrepr does: \\, \", \n..., \xHH.
    def one(match: re.Match[bytes]) -> bytes:
        escaped = match.group(1)
        if escaped[:1] == b"x":
            return bytes([int(escaped[1:], 16)])
        return _ESCAPES.get(escaped, escaped)

    return re.sub(rb"\\(x[0-9a-f]{2}|.)", one, text)


@dataclass
class Call:
    """One EVAL or EVALSHA, with the keys it was given and the commands its script ran."""

    keys: set[bytes]
    commands: list[list[bytes]] = field(default_factory=list)


class Monitor:
    """What a redis-server ran while watched: the script calls and their commands."""

    def __init__(self, url: str) -> None:
        self._pool = redis_py.ConnectionPool.from_url(url)
        self._connection: Any = self._pool.get_connection()
        self._connection.send_command("MONITOR")
        assert self._connection.read_response() == b"OK"
        self._client = redis_py.Redis(connection_pool=self._pool)

    def calls(self) -> list[Call]:
        """Return the script calls run since the watch began, up to now."""
        marker = f"end-of-watch-{time.monotonic_ns()}"
        self._client.echo(marker)
        calls: list[Call] = []
        while True:
            line = self._connection.read_response()
            if marker.encode() in line:
                return calls
            source, quoted = _LINE.match(line).groups()  # type: ignore[union-attr]
            command = [_unquote(argument) for argument in _ARGUMENT.findall(quoted)]
            if source == b"lua":
                calls[-1].commands.append(command)
            elif command[0].upper() in (b"EVAL", b"EVALSHA"):
                calls.append(Call(set(command[3 : 3 + int(command[2])])))

    def keys_of(self, command: list[bytes]) -> set[bytes]:
        """Return the keys ``command`` touches, as the server says (COMMAND GETKEYS)."""
        try:
            keys = self._client.command_getkeys(*command)
        except redis_py.ResponseError:  # a command without keys: TIME
            return set()
        return {key.encode() if isinstance(key, str) else key for key in keys}

    def undeclared(self) -> list[str]:
        """Return each command a script ran on a key it was not given, with those keys."""
        calls = self.calls()
        assert calls, "no script ran"
        return [
            f"{b' '.join(command[:2]).decode()}: {sorted(touched - call.keys)}"
            for call in calls
            for command in call.commands
            if (touched := self.keys_of(command)) - call.keys
        ]

    def close(self) -> None:
        self._connection.disconnect()
        self._pool.disconnect()


@pytest.fixture
def watch(redis_url: str) -> Iterator[Monitor]:
    monitor = Monitor(redis_url)
    yield monitor
    monitor.close()


@pytest.fixture(params=[0, 60], ids=["clock-fence", "durable-fence"])
def using(request: pytest.FixtureRequest, redis_url: str, prefix: str) -> Iterator[str]:
    """The suite's Redis backend: fencing tokens from the clock, or a durable counter."""
    setting = locks_setting(redis_url, prefix)
    setting["default"]["OPTIONS"]["fencing_ttl"] = request.param
    with override_settings(LOCKS=setting):
        yield "default"


# Workloads ---------------------------------------------------------------------------------


def plain_locks(using: str) -> None:
    with lock("keys:plain", using=using) as held, lock("keys:plain", using=using):
        held.extend(5)
        assert held.ttl() is not None
    assert not lock("keys:plain", using=using).locked()


def handoff(using: str) -> None:
    # A waiter, fair or not, is handed the lock at release and woken by the client.
    for fair in (False, True):
        holder = lock("keys:handoff", using=using, fair=fair)
        assert holder.acquire()
        taken: list[bool] = []

        def wait(fair: bool = fair, taken: list[bool] = taken) -> None:
            with lock("keys:handoff", using=using, fair=fair, timeout=10) as waiter:
                taken.append(waiter.fencing_token is not None)

        thread = threading.Thread(target=wait)
        thread.start()
        eventually(lambda: queued(locks[using], "keys:handoff") == 1)
        holder.release()
        thread.join(10)
        assert taken == [True]


def semaphore_and_min_hold(using: str) -> None:
    first, second, third = (
        lock("keys:sem", using=using, limit=2, owner=owner) for owner in ("a", "b", "c")
    )
    assert first.acquire()
    assert second.acquire()
    assert not third.acquire(timeout=0.2)
    first.release()
    second.release()
    with lock("keys:window", using=using, min_hold=0.2):
        pass
    assert not lock("keys:window", using=using, blocking=False).acquire()


def read_write(using: str) -> None:
    reading = rwlock("keys:rw", using=using).read()
    assert reading.acquire()

    def write() -> None:
        with rwlock("keys:rw", using=using, timeout=10).write():
            pass

    thread = threading.Thread(target=write)
    thread.start()
    eventually(lambda: queued(locks[using], "keys:rw") == 1)
    # Another reader queues behind the waiting writer.
    assert not in_thread(lambda: rwlock("keys:rw", using=using).read().acquire(blocking=False))
    reading.release()
    thread.join(10)


def withdrawals_and_force_release(using: str) -> None:
    backend = locks[using]
    assert backend.acquire("keys:undo", "holder", AcquireRequest(ttl=30)).acquired
    request = AcquireRequest(ttl=30, wait=30, fair=True, attempt="a.1")
    assert not backend.acquire("keys:undo", "waiter", request).acquired
    backend.withdraw("keys:undo", "waiter", 0, "a.1")
    assert not backend.acquire("keys:undo", "waiter", request).acquired  # withdrawn: nothing
    request = AcquireRequest(ttl=30, wait=30, fair=True, attempt="b.1")
    assert not backend.acquire("keys:undo", "other", request).acquired
    assert backend.force_release("keys:undo") == 1  # handed to the waiting "other"
    backend.withdraw("keys:undo", "other", 0, "b.1")
    assert not backend.locked("keys:undo")


def all_or_nothing(using: str) -> None:
    with lock_all(["keys:a", "keys:b"], using=using):
        pass
    with lock("keys:b", using=using):
        other = lock_all(["keys:a", "keys:b"], using=using, blocking=False)
        assert not in_thread(other.acquire)


def asyncio_waiters(using: str) -> None:
    async def main() -> None:
        handle = alock("keys:async", using=using, timeout=10)

        async def work() -> None:
            for _ in range(3):
                async with handle:
                    await asyncio.sleep(0.01)

        await asyncio.gather(*(work() for _ in range(3)))

    asyncio.run(main())


def leader_election(using: str) -> None:
    campaign = leader("keys:leader", using=using, ttl=5)
    with campaign as term:
        assert term.number is not None
        assert campaign.leader() is not None


def rate_limits(using: str) -> None:
    handle = rate_limit("keys:rate", ["2/s", "5/m"], using=using, blocking=False)
    assert [handle.acquire() for _ in range(3)] == [True, True, False]
    assert handle.acquire(cost=2) is False
    locks[using].schedule_retry("keys:rate", Rate(2, 1.0), 0.5)
    assert [info.used for info in locks[using].iter_rate_limits("keys:rate")] == [2, 2]


WORKLOADS = [
    plain_locks,
    handoff,
    semaphore_and_min_hold,
    read_write,
    withdrawals_and_force_release,
    all_or_nothing,
    asyncio_waiters,
    leader_election,
    rate_limits,
]


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda workload: workload.__name__)
def test_every_key_a_script_touches_is_given_in_keys(
    workload: Callable[[str], None], using: str, watch: Monitor
) -> None:
    workload(using)
    assert watch.undeclared() == []


def test_beats_claim_touches_only_its_keys(watch: Monitor, raw_redis: redis_py.Redis) -> None:
    raw_redis.eval(CLAIM, 2, "keys:{=beat}:h", "keys:{=beat}:beat", "o", "1", "e", "0", "1", "f")
    assert watch.undeclared() == []


def test_the_watch_sees_a_key_a_script_was_not_given(
    watch: Monitor, raw_redis: redis_py.Redis
) -> None:
    raw_redis.eval("return redis.call('EXISTS', KEYS[1] .. ':q')", 1, "keys:{=seen}:h")
    assert watch.undeclared() == ["EXISTS keys:{=seen}:h:q: [b'keys:{=seen}:h:q']"]
