"""Redis Sentinel processes that watch a :class:`ReplicatedRedis` and fail it over."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import redis

from .. import RedisServer, RedisServerError
from ._common import (
    HOST,
    Address,
    _command,
    _hold_ports,
    _info,
    _NotYet,
    _pairs,
    _release_ports,
    _reserve_port,
    _stop_all,
    _Topology,
    _wait_for,
)
from .replication import ReplicatedRedis

# --------------------------------------------------------------------------------------------
# Sentinel


class _SentinelServer(RedisServer):
    """A ``redis-server <conf> --sentinel`` process, with its own writable sentinel.conf."""

    def __init__(self, *, port: int, directives: list[str], binary: str | None = None) -> None:
        super().__init__(port=port, binary=binary)
        self.directives = list(directives)

    @property
    def address(self) -> Address:
        """Return the (host, port) clients use to ask this sentinel."""
        return (HOST, self.port)

    def start(self, timeout: float = 10.0) -> _SentinelServer:
        """Write sentinel.conf, start the sentinel and wait until it answers PING."""
        if self.process is not None:
            raise RedisServerError("this sentinel is already running")
        self._dir = tempfile.TemporaryDirectory(prefix="django-redis-lock-sentinel-")
        conf = Path(self._dir.name, "sentinel.conf")
        lines = [
            f"port {self.port}",
            f"bind {HOST}",
            "daemonize no",
            f'dir "{self._dir.name}"',
            "loglevel notice",
            f'logfile "{Path(self._dir.name, "redis.log")}"',
            *self.directives,
        ]
        conf.write_text("\n".join(lines) + "\n")
        # stderr to a file: a config error is written there before the log file is opened.
        stderr_path = Path(self._dir.name, "stderr.txt")
        with stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(  # noqa: S603  (a fixed binary with our arguments)
                [self.binary, str(conf), "--sentinel"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.process.poll() is not None:
                output = (stderr_path.read_text(errors="replace") + self.log()).strip()
                self.stop()
                raise RedisServerError(f"redis sentinel exited at start: {output[-500:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RedisServerError(f"redis sentinel did not answer within {timeout}s")
            time.sleep(0.01)
        return self


class SentinelRedis(_Topology):
    """A :class:`ReplicatedRedis` monitored by ``sentinels`` Redis Sentinel processes.

    The sentinels watch the primary as ``service_name`` with a quorum of a majority, declare
    it down after ``down_after`` seconds and may retry a failover after ``failover_timeout``
    seconds. ``start()`` waits until every sentinel knows the primary, the replicas and every
    other sentinel. ``kill_primary()`` then ``wait_for_failover()`` test a failover.
    """

    def __init__(
        self,
        replicas: int = 1,
        sentinels: int = 3,
        service_name: str = "mymaster",
        down_after: float = 0.5,
        failover_timeout: float = 2.0,
        *,
        binary: str | None = None,
    ) -> None:
        if sentinels < 1:
            raise ValueError("sentinels must be >= 1")
        if not service_name or any(c.isspace() or c == '"' for c in service_name):
            raise ValueError("service_name must be one word")
        self.replicated = ReplicatedRedis(replicas, binary=binary)
        self._service_name = service_name
        self.quorum = sentinels // 2 + 1
        self.down_after = down_after
        self.failover_timeout = failover_timeout
        name = service_name
        directives = [
            "sentinel resolve-hostnames no",
            "sentinel announce-hostnames no",
            f"sentinel monitor {name} {HOST} {self.replicated.primary.port} {self.quorum}",
            f"sentinel down-after-milliseconds {name} {max(1, round(down_after * 1000))}",
            f"sentinel failover-timeout {name} {max(1, round(failover_timeout * 1000))}",
            f"sentinel parallel-syncs {name} 1",
        ]
        self.sentinel_servers = [
            _SentinelServer(port=_reserve_port(), directives=directives, binary=binary)
            for _ in range(sentinels)
        ]
        self._killed: Address | None = None
        self._started = False

    @property
    def service_name(self) -> str:
        """Return the name the sentinels monitor the primary as."""
        return self._service_name

    @property
    def sentinels(self) -> list[Address]:
        """Return the sentinels' (host, port) addresses, as ``redis.sentinel.Sentinel`` takes."""
        return [server.address for server in self.sentinel_servers]

    @property
    def primary(self) -> RedisServer:
        """Return the server started as the primary (not necessarily the primary any more)."""
        return self.replicated.primary

    @property
    def replicas(self) -> list[RedisServer]:
        """Return the servers started as replicas."""
        return self.replicated.replicas

    @property
    def servers(self) -> list[RedisServer]:
        """Return every data server (not the sentinels): the first primary, then the replicas."""
        return self.replicated.servers

    def start(self, timeout: float = 20.0) -> SentinelRedis:
        """Start the replicated servers, then the sentinels; wait until they know each other."""
        if self._started:
            raise RedisServerError("this SentinelRedis is already running")
        self._started = True
        _hold_ports(server.port for server in self.sentinel_servers)
        try:
            self.replicated.start(timeout)
            for server in self.sentinel_servers:
                server.start(timeout)
            for server in self.sentinel_servers:
                self._wait_until_informed(server, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_informed(self, server: _SentinelServer, timeout: float) -> None:
        others = len(self.sentinel_servers) - 1
        expected_replicas = {replica.port for replica in self.replicas}
        primary_port = self.replicated.primary.port

        def informed() -> None:
            master = _pairs(_command(server.port, "SENTINEL", "MASTER", self.service_name))
            flags = master.get("flags", "")
            if master.get("port") != str(primary_port) or "down" in flags or "disc" in flags:
                raise _NotYet(f"master {master.get('ip')}:{master.get('port')} {master}")
            if master.get("num-other-sentinels") != str(others):
                raise _NotYet(f"num-other-sentinels={master.get('num-other-sentinels')}")
            replicas = [
                _pairs(reply)
                for reply in _command(server.port, "SENTINEL", "REPLICAS", self.service_name)
            ]
            seen = {
                int(replica["port"])
                for replica in replicas
                if "down" not in replica.get("flags", "")
                and replica.get("master-link-status") == "ok"
            }
            if seen != expected_replicas:
                raise _NotYet(f"replicas seen linked {sorted(seen)}, expected {expected_replicas}")

        _wait_for(
            informed,
            f"sentinel 127.0.0.1:{server.port} to know the primary, {others} other sentinel(s) "
            f"and {len(expected_replicas)} replica(s)",
            timeout,
        )

    def _running_sentinels(self) -> list[_SentinelServer]:
        return [server for server in self.sentinel_servers if server.process is not None]

    def _address_from(self, server: _SentinelServer) -> Address:
        reply = _command(server.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service_name)
        if not reply:
            raise _NotYet(f"sentinel 127.0.0.1:{server.port} knows no {self.service_name!r}")
        host, port = reply
        return (str(host), int(port))

    def current_primary(self) -> Address:
        """Return the primary's (host, port), as the first sentinel that answers reports it."""
        errors: list[str] = []
        for server in self._running_sentinels():
            try:
                return self._address_from(server)
            except (_NotYet, redis.RedisError, OSError) as exc:
                errors.append(f"127.0.0.1:{server.port}: {exc}")
        raise RedisServerError(f"no sentinel reported the primary: {errors}")

    def server_at(self, address: Address) -> RedisServer:
        """Return the data server listening at ``address``."""
        for server in self.servers:
            if address == (HOST, server.port):
                return server
        raise RedisServerError(f"no server of this topology at {address[0]}:{address[1]}")

    def kill_primary(self) -> Address:
        """Stop the current primary's process (as the sentinels report it); return its address."""
        address = self.current_primary()
        self.server_at(address).stop()
        self._killed = address
        return address

    def wait_for_failover(self, timeout: float = 20.0) -> Address:
        """Wait until the sentinels promote another server; return the new primary's address.

        "Another" is other than the primary ``kill_primary()`` stopped last (or, without one,
        the primary when called). Done when every running sentinel reports the same new
        address and the server there answers as ``role:master``.
        """
        old = self._killed or self.current_primary()

        def failed_over() -> Address:
            addresses = {self._address_from(server) for server in self._running_sentinels()}
            if len(addresses) != 1:
                raise _NotYet(f"the sentinels disagree: {sorted(addresses)}")
            (address,) = addresses
            if address == old:
                raise _NotYet(f"the sentinels still report {address[0]}:{address[1]}")
            role = _info(address[1], "replication").get("role")
            if role != "master":
                raise _NotYet(f"{address[0]}:{address[1]} answers as role:{role}")
            return address

        address = _wait_for(
            failed_over, f"a failover away from {old[0]}:{old[1]}", timeout, interval=0.1
        )
        self._killed = None
        return address

    def stop(self) -> None:
        """Stop the sentinels, then the data servers, and remove their files."""
        try:
            _stop_all(self.sentinel_servers)
        finally:
            _release_ports(server.port for server in self.sentinel_servers)
            self.replicated.stop()
            self._started = False
