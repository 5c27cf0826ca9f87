"""Behaviour specific to RedisBackend: key layout, scripts, SCAN, faults of the server."""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis as redis_py
from redis.crc import key_slot

from django_redis_lock import BackendUnavailableError, lock, locks
from django_redis_lock._core.owner import new_attempt
from django_redis_lock.backends._redis import protocol
from django_redis_lock.backends.base import AcquireRequest, ReleaseRequest, holder_metadata
from django_redis_lock.backends.redis import RedisBackend, redact_url
from django_redis_lock.testing import RedisServer
from tests.support.helpers import blocked_clients, eventually


def keys_of(client: redis_py.Redis, prefix: str) -> list[str]:
    return sorted(k.decode() for k in client.scan_iter(match=f"{prefix}:*"))


def test_keys__a_held_lock_is_one_hash(raw_redis: redis_py.Redis, prefix: str) -> None:
    with lock("reports:daily") as handle:
        held = keys_of(raw_redis, prefix)
        [(owner, record)] = raw_redis.hgetall(held[0]).items()
        token = handle.fencing_token
    assert held == [f"{prefix}:{{=reports:daily}}:h"]
    assert owner.decode() == handle._owner_token()
    assert record.split(b" ")[2] == str(token).encode()


@pytest.mark.parametrize("name", ["reports:daily", "}starts-with-a-brace", "}", "a}b{c}", "{x}"])
def test_keys__of_a_name_with_braces_share_one_cluster_slot(
    raw_redis: redis_py.Redis, prefix: str, name: str
) -> None:
    holder = lock(name)
    with holder:
        waiter = lock(name)
        waiting = threading.Thread(target=lambda: waiter.acquire(timeout=5) and waiter.release())
        waiting.start()
        eventually(lambda: len(keys_of(raw_redis, prefix)) == 3)  # holders, queue, waiters
        held = keys_of(raw_redis, prefix)
    waiting.join(5)
    assert {key.rsplit(":", 1)[-1] for key in held} == {"h", "q", "w"}
    assert len({key_slot(key.encode()) for key in held}) == 1, held


def test_release__leaves_no_key(raw_redis: redis_py.Redis, prefix: str) -> None:
    handle = lock("leftover", ttl=30)
    for _ in range(3):
        with handle, lock("leftover"):
            pass
    assert keys_of(raw_redis, prefix) == []


def test_release__with_fencing_ttl_leaves_only_the_durable_counter(
    raw_redis: redis_py.Redis, redis_url: str, prefix: str
) -> None:
    backend = RedisBackend(url=redis_url, key_prefix=prefix, fencing_ttl=86400)
    meta = holder_metadata(host="h", pid=1, thread="t")
    for _ in range(3):
        assert backend.acquire("leftover", "owner", AcquireRequest(ttl=30, metadata=meta)).acquired
        assert backend.release("leftover", "owner") == 0
    assert keys_of(raw_redis, prefix) == [f"{prefix}:{{=leftover}}:f"]
    counter_ttl = raw_redis.pttl(f"{prefix}:{{=leftover}}:f")
    assert 86_000_000 < counter_ttl <= 86_430_000
    backend.close()


def test_lease__the_key_expires_with_the_lease(raw_redis: redis_py.Redis, prefix: str) -> None:
    with lock("expiring", ttl=7):
        assert 6000 < raw_redis.pttl(f"{prefix}:{{=expiring}}:h") <= 7000


def test_min_hold__the_window_is_one_hash_field_expiring_with_it(
    raw_redis: redis_py.Redis, prefix: str
) -> None:
    with lock("nightly", ttl=30, min_hold=5) as handle:
        owner = handle._owner_token()
    key = f"{prefix}:{{=nightly}}:h"
    assert keys_of(raw_redis, prefix) == [key]
    [(field, record)] = raw_redis.hgetall(key).items()
    assert field.decode() == f"min_hold:{owner}"
    ends, holds, _, acquired_at = (int(part) for part in record.split(b" ")[:4])
    assert (ends - acquired_at, holds) == (5000, 0)
    assert 4500 < raw_redis.pttl(key) <= 5000  # the key ends with the window, not the lease


def test_release__without_min_hold_a_lone_holder_is_freed_by_the_fast_path(
    raw_redis: redis_py.Redis,
) -> None:
    """min_hold=0 costs the release one argument comparison: no clock read, no helpers."""
    handle = lock("fast", ttl=30, min_hold=0)
    for _ in range(2):  # the first round loads the scripts
        handle.acquire()
        raw_redis.config_resetstat()
        handle.release()
    # Redis 7 and Valkey count subcommands apart ("cmdstat_config|resetstat").
    called = {
        stat
        for stat in raw_redis.info("commandstats")
        if stat.split("|")[0] not in ("cmdstat_config", "cmdstat_info")
    }
    assert called == {f"cmdstat_{c}" for c in ("evalsha", "hrandfield", "exists", "del")}


def test_min_hold__the_window_runs_from_the_acquire_the_server_recorded(
    raw_redis: redis_py.Redis, prefix: str
) -> None:
    """The server's record of the acquire counts, not the releasing client's clock."""
    backend = locks["default"]
    meta = holder_metadata(host="h", pid=1, thread="t")
    assert backend.acquire("nightly", "owner", AcquireRequest(ttl=30, metadata=meta)).acquired
    key = f"{prefix}:{{=nightly}}:h"
    ends, holds, fence, acquired_at, rest = raw_redis.hget(key, "owner").split(b" ", 4)
    # As if acquired 10 s ago on the server's clock: a 5 s window has passed already.
    earlier = str(int(acquired_at) - 10_000).encode()
    raw_redis.hset(key, "owner", b" ".join([ends, holds, fence, earlier, rest]))
    assert backend.release("nightly", "owner", ReleaseRequest(min_hold=5)) == 0
    assert keys_of(raw_redis, prefix) == []


def test_scripts__reloaded_after_script_flush(raw_redis: redis_py.Redis) -> None:
    raw_redis.script_flush()
    with lock("after-flush") as handle:
        assert handle.owned()


def test_renew__reloads_its_script_after_script_flush(raw_redis: redis_py.Redis) -> None:
    backend = locks["default"]
    with lock("renew-after-flush", ttl=5) as handle:
        owner = handle._owner_token()
        assert backend.renew([("renew-after-flush", owner, 20)]) == [20.0]
        raw_redis.script_flush()  # as a restarted server would have no scripts
        assert backend.renew([("renew-after-flush", owner, 30)]) == [30.0]


def test_wait_and_claim__claims_when_the_server_lost_its_scripts_meanwhile(
    own_server: RedisServer,
) -> None:
    backend = RedisBackend(url=own_server.url)
    client = redis_py.Redis.from_url(own_server.url)
    assert backend.acquire("flushed", "holder", AcquireRequest(ttl=30)).acquired
    assert not backend.acquire("flushed", "waiter", AcquireRequest(ttl=30, wait=10)).acquired
    claim = AcquireRequest(ttl=30, wait=10, claim=True)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(backend.wait_and_claim, "flushed", "waiter", 5, claim)
        eventually(lambda: blocked_clients(client) == 1)
        client.script_flush()  # as a restart would: the claim queued behind the wait fails
        assert backend.release("flushed", "holder") == 0
        result = waiting.result(timeout=10)
    assert result.acquired
    assert result.lease is not None
    assert result.lease > 1  # the full lease, not the grant's
    backend.close()
    client.close()


def test_wait_and_claim__interrupted_before_reading_leaves_no_reply_behind(
    own_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The wait and the claim are written at once: an interrupt before their replies are read
    # must not leave them to answer the next command sent on the pooled connection.
    backend = RedisBackend(url=own_server.url)
    client = redis_py.Redis.from_url(own_server.url)
    assert backend.acquire("cut", "holder", AcquireRequest(ttl=30)).acquired
    assert not backend.acquire("cut", "waiter", AcquireRequest(ttl=30, wait=10)).acquired

    def interrupted(connection: object, error_reply: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(protocol, "_reply", interrupted)
    with pytest.raises(KeyboardInterrupt):
        backend.wait_and_claim("cut", "waiter", 3, AcquireRequest(ttl=30, wait=10, claim=True))
    monkeypatch.undo()
    remaining = backend.ttl("cut", "holder")  # at once, while a wait left behind would block
    assert remaining is not None
    assert 29 < remaining <= 30
    eventually(lambda: blocked_clients(client) == 0)
    backend.close()
    client.close()


def test_acquire__an_earlier_attempt_run_late_takes_nothing_from_a_later_one() -> None:
    # An acquire that timed out may reach the server after its owner's next acquire took the
    # lock; the withdrawal owed for it comes after it, and must leave the later hold alone.
    backend = locks["default"]
    meta = holder_metadata(host="h", pid=1, thread="t")
    earlier, later = new_attempt(), new_attempt()
    request = AcquireRequest(ttl=30, metadata=meta, holds=0, attempt=later)
    assert backend.acquire("late-attempt", "owner", request).acquired
    late = dataclasses.replace(request, attempt=earlier)
    assert not backend.acquire("late-attempt", "owner", late).acquired
    assert backend.withdraw("late-attempt", "owner", 0, earlier) == 1
    assert backend.release("late-attempt", "owner", ReleaseRequest(holds=1)) == 0


def test_fencing_token__grows_with_no_key_kept_between_holders(
    raw_redis: redis_py.Redis, prefix: str
) -> None:
    tokens = []
    for _ in range(3):
        with lock("fence-free") as handle:
            tokens.append(handle.fencing_token)
        assert keys_of(raw_redis, prefix) == []
    raw_redis.flushdb()  # as if the server restarted empty
    with lock("fence-free") as handle:
        tokens.append(handle.fencing_token)
    assert tokens == sorted(tokens), tokens
    assert len(set(tokens)) == 4, tokens


def test_fencing_token__keeps_growing_after_the_durable_counter_expired(
    raw_redis: redis_py.Redis, redis_url: str, prefix: str
) -> None:
    backend = RedisBackend(url=redis_url, key_prefix=prefix, fencing_ttl=3600)
    meta = holder_metadata(host="h", pid=1, thread="t")
    first = backend.acquire("fence-gone", "owner", AcquireRequest(ttl=30, metadata=meta))
    backend.release("fence-gone", "owner")
    raw_redis.delete(f"{prefix}:{{=fence-gone}}:f")
    second = backend.acquire("fence-gone", "owner", AcquireRequest(ttl=30, metadata=meta))
    backend.release("fence-gone", "owner")
    backend.close()
    assert first.fencing_token is not None
    assert second.fencing_token is not None
    assert second.fencing_token > first.fencing_token


def test_fencing_token__the_durable_counter_outruns_a_clock_stepped_back(
    raw_redis: redis_py.Redis, redis_url: str, prefix: str
) -> None:
    # A counter far ahead of the clock stands for tokens issued before the clock stepped back.
    backend = RedisBackend(url=redis_url, key_prefix=prefix, fencing_ttl=3600)
    ahead = 5 * 10**15  # microseconds: the year 2128
    raw_redis.set(f"{prefix}:{{=stepped}}:f", ahead)
    meta = holder_metadata(host="h", pid=1, thread="t")
    result = backend.acquire("stepped", "owner", AcquireRequest(ttl=30, metadata=meta))
    backend.release("stepped", "owner")
    backend.close()
    assert result.fencing_token == ahead + 1


def test_iter_locks__pages_through_more_keys_than_one_batch(raw_redis: redis_py.Redis) -> None:
    backend = locks["default"]
    assert isinstance(backend, RedisBackend)
    meta = holder_metadata(host="h", pid=1, thread="t")
    for index in range(1200):
        assert backend.acquire(
            f"many:{index}", "owner", AcquireRequest(ttl=30, metadata=meta)
        ).acquired
    names = {info.name for info in backend.iter_locks("many:*", batch_size=100)}
    assert names == {f"many:{index}" for index in range(1200)}
    for index in range(1200):
        backend.release(f"many:{index}", "owner")


def test_iter_locks__ignores_other_keys_under_the_prefix(
    raw_redis: redis_py.Redis, prefix: str
) -> None:
    raw_redis.set(f"{prefix}:{{=not-a-lock}}:h", "a string, not a holders hash")
    raw_redis.hset(f"{prefix}:{{=stray}}:w", "x", "1")
    with lock("real"):
        assert [info.name for info in locks["default"].iter_locks()] == ["real"]


def test_unix_socket__urls_work() -> None:
    with RedisServer(unix_socket=True) as server:
        backend = RedisBackend(url=server.url)
        meta = holder_metadata(host="h", pid=1, thread="t")
        assert backend.acquire("unix", "me", AcquireRequest(ttl=5, metadata=meta)).acquired
        assert backend.release("unix", "me") == 0
        backend.close()


def test_unavailable__stopped_server_raises_backend_unavailable(own_server: RedisServer) -> None:
    url = own_server.url.replace("redis://", "redis://:hunter2@")
    own_server.stop()
    backend = RedisBackend(url=url, socket_timeout=0.5, socket_connect_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(BackendUnavailableError) as caught:
        backend.acquire("down", "me", AcquireRequest(ttl=5, metadata="{}"))
    assert time.monotonic() - started < 2
    assert caught.value.lock_name == "down"
    assert "hunter2" not in str(caught.value)
    assert isinstance(caught.value.__cause__, redis_py.ConnectionError)


def test_unavailable__paused_server_fails_within_the_socket_timeout(
    own_server: RedisServer,
) -> None:
    backend = RedisBackend(url=own_server.url, socket_timeout=0.5, socket_connect_timeout=0.5)
    backend.ping()
    own_server.pause()
    try:
        for call in (
            lambda: backend.acquire("frozen", "me", AcquireRequest(ttl=5, metadata="{}")),
            lambda: backend.release("frozen", "me"),
            lambda: list(backend.iter_locks()),
            backend.ping,
        ):
            started = time.monotonic()
            with pytest.raises(BackendUnavailableError):
                call()
            assert time.monotonic() - started < 0.5 + 1.0
    finally:
        own_server.resume()
    backend.close()
    assert backend.acquire("frozen", "me", AcquireRequest(ttl=5, metadata="{}")).acquired, (
        "recovers after"
    )


def test_unavailable__lock_calls_raise_backend_unavailable(own_server: RedisServer) -> None:
    from django.test import override_settings

    setting = {
        "default": {
            "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
            "OPTIONS": {"url": own_server.url, "socket_timeout": 0.5},
        }
    }
    with override_settings(LOCKS=setting):
        handle = lock("via-lock")
        handle.acquire()
        own_server.stop()
        with pytest.raises(BackendUnavailableError):
            handle.release()
        with pytest.raises(BackendUnavailableError), lock("via-lock-2"):
            pass


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
        ("redis://user:pw@host/0", "redis://user:***@host/0"),
        ("rediss://host:6380", "rediss://host:6380"),
        ("unix:///tmp/r.sock?db=1", "unix:///tmp/r.sock?db=1"),
        ("redis://u:pw@[::1]:6379/0", "redis://u:***@[::1]:6379/0"),
        ("unix:///tmp/r.sock?db=1&password=pw", "unix:///tmp/r.sock?db=1&password=***"),
        # A password may hold '&': everything after password= is hidden.
        ("redis://host/0?password=pw&ssl_cert_reqs=none", "redis://host/0?password=***"),
    ],
)
def test_redact_url__hides_passwords(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    shown_by_repr = repr(RedisBackend(url=url))
    assert shown in shown_by_repr
    assert ":pw@" not in shown_by_repr


@pytest.mark.slow  # redis-py asks each unreachable sentinel in turn
def test_sentinel__errors_name_the_service_not_the_url_host() -> None:
    backend = RedisBackend(
        url="redis://:secret@nohost.invalid:1/0",
        sentinels=["127.0.0.1:1"],
        service_name="orders",
        socket_timeout=0.2,
        socket_connect_timeout=0.2,
    )
    with pytest.raises(BackendUnavailableError) as caught:
        backend.ping()
    message = str(caught.value)
    assert message.startswith("The Redis primary 'orders' (found by Sentinel) is unavailable: ")
    assert "nohost" not in message
    assert "secret" not in message
    backend.close()


def test_upgrade__a_lock_held_in_the_old_layout_is_refused_not_taken(
    raw_redis: redis_py.Redis, prefix: str
) -> None:
    # Until its lease ends, a lock held by a process of the version before the one-key layout
    # (a sorted set of holders) answers WRONGTYPE: an error, never a second holder.
    key = f"{prefix}:{{=upgrading}}:h"
    raw_redis.zadd(key, {"old-owner": 4_000_000_000_000})
    raw_redis.pexpire(key, 30_000)
    with pytest.raises(BackendUnavailableError, match="WRONGTYPE"):
        lock("upgrading").acquire(blocking=False)
    assert raw_redis.type(key) == b"zset"
    assert raw_redis.zrange(key, 0, -1) == [b"old-owner"]
    raw_redis.delete(key)
