"""A Redis Cluster of primaries, created with ``redis-cli --cluster create``."""

from __future__ import annotations

import subprocess

from .. import RedisServer, RedisServerError
from ._common import (
    CLUSTER_BUS_OFFSET,
    CLUSTER_SLOTS,
    HOST,
    Address,
    _command,
    _hold_ports,
    _log_tail,
    _NotYet,
    _pairs_from_text,
    _release_ports,
    _reserve_port,
    _stop_all,
    _text,
    _Topology,
    _wait_for,
    find_redis_cli,
)

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
