"""Independent Redis masters, as Redlock uses them."""

from __future__ import annotations

from .. import RedisServer
from ._common import (
    HOST,
    Address,
    _hold_ports,
    _release_ports,
    _reserve_port,
    _stop_all,
    _Topology,
)

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
