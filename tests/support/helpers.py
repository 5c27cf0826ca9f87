"""Small helpers shared by tests and the worker processes they start."""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing
import multiprocessing.process
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings
from django.core.signals import setting_changed
from django.test import override_settings

if TYPE_CHECKING:
    from django_redis_lock.backends.base import BaseLockBackend

T = TypeVar("T")


def eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until ``predicate()`` holds (a lease that must end, say); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout}s")
        time.sleep(0.005)


async def aeventually(
    predicate: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0
) -> None:
    """Wait until ``predicate()`` (awaited if need be) holds, without blocking the loop."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = predicate()
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if outcome:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout}s")
        await asyncio.sleep(0.005)


def in_thread(func: Callable[[], T]) -> T:
    """Run ``func`` in another thread (another lock owner) and return its result."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(func())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    if errors:
        raise errors[0]
    return result[0]  # type: ignore[no-any-return]


def queued(backend: BaseLockBackend, name: str) -> int:
    """Return how many owners wait for ``name``, from the backend's own queue of waiters."""
    from django_redis_lock.backends.locmem import LocMemBackend
    from django_redis_lock.backends.redis import RedisBackend

    if isinstance(backend, RedisBackend):
        return int(backend.client.zcard(backend.key(name, "q")))
    if isinstance(backend, LocMemBackend):
        entry = backend._locks.get(name)
        return 0 if entry is None else len(entry.queue)
    raise AssertionError(
        f"{type(backend).__name__} keeps no queue of waiters: mark the test "
        '@pytest.mark.needs("waiter_queue")'
    )


def locks_setting(
    url: str,
    prefix: str,
    *,
    cluster_nodes: Sequence[str] = (),
    redlock_urls: Sequence[str] = (),
    valkey_client: bool = False,
) -> dict[str, Any]:
    """Return the LOCKS value of the suite: 'default' on Redis, 'locmem' in process.

    Given their servers, 'cluster' (a Redis Cluster, ``host:port`` startup nodes) and
    'redlock' (independent masters) are added; with ``valkey_client``, 'valkey_client' (the
    server of 'default' through the valkey client, chosen by a valkey:// URL). Every alias
    keeps its keys under ``prefix``.
    """
    setting: dict[str, Any] = {
        "default": {
            "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
            "OPTIONS": {"url": url, "key_prefix": prefix},
        },
        "locmem": {
            "BACKEND": "django_redis_lock.backends.locmem.LocMemBackend",
            "OPTIONS": {"key_prefix": prefix},
        },
    }
    if cluster_nodes:
        setting["cluster"] = {
            "BACKEND": "django_redis_lock.backends.cluster.RedisClusterBackend",
            "OPTIONS": {"startup_nodes": list(cluster_nodes), "key_prefix": prefix},
        }
    if valkey_client:
        setting["valkey_client"] = {
            "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
            "OPTIONS": {"url": url.replace("redis://", "valkey://", 1), "key_prefix": prefix},
        }
    if redlock_urls:
        setting["redlock"] = {
            "BACKEND": "django_redis_lock.backends.redlock.RedlockBackend",
            # The masters share the machine with other tests' processes: a reply later than
            # Redlock's default socket timeout (0.2 s) would read as a master that is down.
            "OPTIONS": {"urls": list(redlock_urls), "key_prefix": prefix, "socket_timeout": 1.0},
        }
    return setting


def _announce_locks_changed(*, enter: bool) -> None:
    # Deleting a setting sends no setting_changed; send it as override_settings would.
    setting_changed.send(
        sender=type(settings._wrapped),
        setting="LOCKS",
        value=getattr(settings, "LOCKS", None),
        enter=enter,
    )


@contextmanager
def without_locks_setting() -> Iterator[None]:
    """Run the block as if settings.py had no LOCKS at all."""
    override = override_settings()
    override.enable()
    try:
        del settings.LOCKS
        _announce_locks_changed(enter=True)
        yield
    finally:
        override.disable()
        _announce_locks_changed(enter=False)


class SlowLink:
    """A TCP proxy on loopback that delays every chunk by ``delay`` seconds each way.

    A real network farther away than the lease is long: what a lock sees when its Redis is a
    few milliseconds away and its ``ttl`` shorter than that.
    """

    def __init__(self, host: str, port: int, delay: float) -> None:
        self.target, self.delay = (host, port), delay
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self.target)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                time.sleep(self.delay)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                end.close()

    def close(self) -> None:
        self.server.close()


def python_without_settings(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter at the repository root, with no settings module."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@contextmanager
def read_write_holds(
    name: str, *, using: str, readers: int, waiting_writer: bool = False
) -> Iterator[None]:
    """Hold ``name`` as a read-write lock for ``readers`` threads, each its own owner.

    The readers run in threads named ``reader-0``, ``reader-1``…; with ``waiting_writer``, a
    thread named ``writer`` waits to write, behind them, before the block runs. At its end,
    every thread lets go (the writer takes the lock, then lets it go too); a reader freed by a
    force-release meanwhile does not raise.
    """
    from django_redis_lock import locks, rwlock

    rw = rwlock(name, using=using, timeout=30, raise_on_lost=False)
    done = threading.Event()
    holding = [threading.Event() for _ in range(readers)]

    def read(index: int) -> None:
        with rw.read():
            holding[index].set()
            done.wait(30)

    def write() -> None:
        with rw.write():
            pass

    threads = [
        threading.Thread(target=read, args=(index,), name=f"reader-{index}", daemon=True)
        for index in range(readers)
    ]
    try:
        for thread in threads:
            thread.start()
        for event in holding:
            assert event.wait(10), "a reader did not acquire"
        if waiting_writer:
            threads.append(threading.Thread(target=write, name="writer", daemon=True))
            threads[-1].start()
            eventually(lambda: len(locks[using].waiters(name)) == 1)
        yield
    finally:
        done.set()
        for thread in threads:
            thread.join(30)


def own_locks(server: Any, **options: Any) -> dict[str, Any]:
    """Return LOCKS with one alias, ``default``, on ``server`` (a RedisServer of the test's
    own, to freeze or stop), with calls that give up after half a second."""
    return {
        "default": {
            "BACKEND": "django_redis_lock.backends.redis.RedisBackend",
            "OPTIONS": {"url": server.url, "socket_timeout": 0.5, **options},
        }
    }


def blocked_clients(client: Any) -> int:
    """Return how many clients of ``client``'s server are blocked (a BLPOP, say)."""
    return int(client.info("clients")["blocked_clients"])


def most_in_a_window(times: Sequence[float], period: float) -> int:
    """Return the most of ``times`` (seconds) that fall in one window ``(t - period, t]``.

    For rate limits: no window of the period may hold more admissions than the limit.
    """
    ordered, most, first = sorted(times), 0, 0
    for last, moment in enumerate(ordered):
        while ordered[first] <= moment - period:
            first += 1
        most = max(most, last - first + 1)
    return most


@contextmanager
def running(children: Sequence[multiprocessing.process.BaseProcess]) -> Iterator[None]:
    """Start ``children``; on the way out, kill the ones still alive (a hang, or a failure)."""
    for child in children:
        child.start()
    try:
        yield
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
            child.join(30)
