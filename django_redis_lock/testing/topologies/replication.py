"""A primary with replicas, on loopback TCP: the data servers of a replicated deployment."""

from __future__ import annotations

from .. import RedisServer, RedisServerError
from ._common import (
    HOST,
    _command,
    _hold_ports,
    _info,
    _NotYet,
    _release_ports,
    _reserve_port,
    _stop_all,
    _Topology,
    _wait_for,
)

# --------------------------------------------------------------------------------------------
# Replication


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
