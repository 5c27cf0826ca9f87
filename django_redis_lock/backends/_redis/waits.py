"""The handoff on Redis: the wake-up call to a waiter handed the lock, and the waiter's claim.

A script that hands the lock to a waiter (a release, say) returns the waiter with its reply;
the client then pushes to the waiter's own list (``wake()``): the script may touch only the keys
it was given, and the waiter's list is not among them. The waiter blocks on that list
(``BLPOP``) with its claim (the acquire script) queued behind on the same connection, so the
server runs the claim the moment the wait ends and the waiter wakes once, to both replies.

A wake-up call that is lost (the client died or lost its connection after the script ran)
costs time, never safety: the waiter's claim runs when its wait ends (``max_wait`` at most),
and a grant not claimed within a second has ended by then, to be handed on or taken afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import redis
import redis.asyncio

from ..base import AcquireRequest, AcquireResult
from .loops import PerLoop
from .protocol import acquire_args, acquired, send_together
from .renew import Pipelined
from .scripts import WAKE

__all__ = ["ClaimOnWake"]

logger = logging.getLogger("django_redis_lock")


class ClaimOnWake(Pipelined):
    """The claim sent with the wait on a wake-up list; for :class:`RedisBackend`."""

    client: redis.Redis
    max_wait: float
    wait_replicas: int
    _fencing_arg: bytes
    _async_clients: PerLoop[redis.asyncio.Redis]

    def _run(self, script: str, name: str, args: list[Any], keys: list[str]) -> Any:
        raise NotImplementedError("subclasses of ClaimOnWake must provide a _run() method")

    async def _arun(self, script: str, name: str, args: list[Any], keys: list[str]) -> Any:
        raise NotImplementedError("subclasses of ClaimOnWake must provide an _arun() method")

    # The wake-up calls -------------------------------------------------------------------------

    def wake(self, name: str, reply: Any) -> Any:
        """Return a script's reply, first waking the owners it handed lock ``name`` to."""
        if not _hands_over(reply):
            return reply
        pipe: Any = self.client.pipeline(transaction=False)
        for command in self._wake_commands(name, reply):
            pipe.execute_command(*command)
        try:
            pipe.execute()
        except self.family.error as exc:
            _not_woken(name, exc)
        return reply[1]

    async def awake(self, name: str, reply: Any, client: redis.asyncio.Redis) -> Any:
        """Do what :meth:`wake` does, through the running event loop's ``client``."""
        if not _hands_over(reply):
            return reply
        pipe = client.pipeline(transaction=False)
        for command in self._wake_commands(name, reply):
            pipe.execute_command(*command)
        try:
            await pipe.execute()
        except self.family.error as exc:
            _not_woken(name, exc)
        return reply[1]

    def _wake_commands(self, name: str, reply: list[Any]) -> Iterator[tuple[Any, ...]]:
        # Each owner's call pushed to its list, which ends with the grant (see handoff()).
        for owner, call in zip(reply[2::2], reply[3::2], strict=True):
            key = self.key(name, f"s:{owner.decode() if isinstance(owner, bytes) else owner}")
            yield ("RPUSH", key, call)
            yield ("PEXPIRE", key, call.split()[1])

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
            reply = self._wait_then_claim(name, owner, window, args, request.attempt)
        result = self._claimed(name, self.wake(name, reply))
        if result is None:
            keys = self.script_keys("acquire", name, owner, request.attempt)
            return acquired(self._run("acquire", name, args, keys))
        return result

    def _wait_then_claim(
        self, name: str, owner: str, window: float, args: list[Any], attempt: str
    ) -> Any:
        # The claim's reply (or error reply). Sent together and read back directly: a redis-py
        # Pipeline's bookkeeping would run after the wake-up, on the handoff's clock.
        commands = self._wait_commands(name, owner, window, args, attempt)
        return send_together(self.client.connection_pool, commands, self.family.response_error)[1]

    async def await_and_claim(
        self, name: str, owner: str, timeout: float, request: AcquireRequest
    ) -> AcquireResult:
        window = min(timeout, self.max_wait)
        if self.wait_replicas or window < 0.001:
            return await super().await_and_claim(name, owner, timeout, request)
        args = acquire_args(owner, request, self._fencing_arg)
        client = await self._async_clients.get()
        pipe = client.pipeline(transaction=False)
        for command in self._wait_commands(name, owner, window, args, request.attempt):
            pipe.execute_command(*command)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except self.family.error as exc:
            raise self._unavailable(exc, name) from exc
        result = self._claimed(name, await self.awake(name, replies[1], client))
        if result is None:
            keys = self.script_keys("acquire", name, owner, request.attempt)
            return acquired(await self._arun("acquire", name, args, keys))
        return result

    def _wait_commands(
        self, name: str, owner: str, window: float, args: list[Any], attempt: str
    ) -> list[tuple[Any, ...]]:
        # BLPOP on the owner's wake-up list, then the claim.
        keys = self.script_keys("acquire", name, owner, attempt)
        return [
            ("BLPOP", keys[-1], f"{window:.3f}"),
            ("EVALSHA", self._scripts.sha["acquire"], len(keys), *keys, *args),
        ]

    def _claimed(self, name: str, reply: Any) -> AcquireResult | None:
        """Return the claim's reply, sent with a wait; None if the server lost the script."""
        if isinstance(reply, self.family.no_script_error):  # the server lost its scripts
            self._scripts.lost("acquire")
            return None
        if isinstance(reply, self.family.error):
            raise self._unavailable(reply, name) from reply
        return acquired(reply)


def _not_woken(name: str, exc: Exception) -> None:
    logger.warning(
        "Lock %r was handed to a waiting owner, but its wake-up call could not be sent (%s): "
        "it claims the lock when its wait ends.",
        name,
        exc,
    )


def _hands_over(reply: Any) -> bool:
    # Whether a script's reply carries owners it handed the lock to (reply() in the helpers).
    return type(reply) is list and bool(reply) and reply[0] == WAKE
