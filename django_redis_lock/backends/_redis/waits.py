"""A waiter's claim sent along with its wait on Redis: the handoff in one round trip.

A release that hands the lock to a waiter pushes to the waiter's own list; the waiter blocks on
it (``BLPOP``) with its claim (the acquire script) queued behind on the same connection, so the
server runs the claim the moment the wait ends and the waiter wakes once, to both replies.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio
from redis.exceptions import NoScriptError

from ..base import AcquireRequest, AcquireResult
from .loops import PerLoop
from .protocol import acquire_args, acquired, send_together
from .renew import PipelinedRenewal

__all__ = ["ClaimOnWake"]


class ClaimOnWake(PipelinedRenewal):
    """The claim sent with the wait on a wake-up list; for :class:`RedisBackend`."""

    client: redis.Redis
    max_wait: float
    wait_replicas: int
    _fencing_arg: bytes
    _async_clients: PerLoop[redis.asyncio.Redis]

    def _run(self, script: str, name: str, args: list[Any], *more: str) -> Any:
        raise NotImplementedError("subclasses of ClaimOnWake must provide a _run() method")

    async def _arun(self, script: str, name: str, args: list[Any], *more: str) -> Any:
        raise NotImplementedError("subclasses of ClaimOnWake must provide an _arun() method")

    def wait_and_claim(
        self, name: str, owner: str, timeout: float, request: AcquireRequest
    ) -> AcquireResult:
        # BLPOP and the claim sent together: the server runs the claim the moment the wait
        # ends, and the waiter wakes once, to both replies.
        window = min(timeout, self.max_wait)
        if self.wait_replicas or window < 0.001:
            return super().wait_and_claim(name, owner, timeout, request)
        args = acquire_args(owner, request, self._fencing_arg)
        with self._errors(name):
            self._scripts.load(self.client, "acquire")
            reply = self._wait_then_claim(name, owner, window, args)
        result = self._claimed(name, reply)
        return acquired(self._run("acquire", name, args)) if result is None else result

    def _wait_then_claim(self, name: str, owner: str, window: float, args: list[Any]) -> Any:
        # The claim's reply (or error reply). Sent together and read back directly: a redis-py
        # Pipeline's bookkeeping would run after the wake-up, on the handoff's clock.
        return send_together(
            self.client.connection_pool, self._wait_commands(name, owner, window, args)
        )[1]

    async def await_and_claim(
        self, name: str, owner: str, timeout: float, request: AcquireRequest
    ) -> AcquireResult:
        window = min(timeout, self.max_wait)
        if self.wait_replicas or window < 0.001:
            return await super().await_and_claim(name, owner, timeout, request)
        args = acquire_args(owner, request, self._fencing_arg)
        client = await self._async_clients.get()
        pipe = client.pipeline(transaction=False)
        for command in self._wait_commands(name, owner, window, args):
            pipe.execute_command(*command)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:
            raise self._unavailable(exc, name) from exc
        result = self._claimed(name, replies[1])
        return acquired(await self._arun("acquire", name, args)) if result is None else result

    def _wait_commands(
        self, name: str, owner: str, window: float, args: list[Any]
    ) -> list[tuple[Any, ...]]:
        # BLPOP on the owner's wake-up list, then the claim.
        return [
            ("BLPOP", self.key(name, f"s:{owner}"), f"{window:.3f}"),
            ("EVALSHA", self._scripts.sha["acquire"], 1, self.key(name), *args),
        ]

    def _claimed(self, name: str, reply: Any) -> AcquireResult | None:
        """Return the claim's reply, sent with a wait; None if the server lost the script."""
        if isinstance(reply, NoScriptError):  # the server lost its scripts (a restart)
            self._scripts.lost("acquire")
            return None
        if isinstance(reply, redis.RedisError):
            raise self._unavailable(reply, name) from reply
        return acquired(reply)
