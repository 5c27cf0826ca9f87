"""The handoff on Redis: the wake-up call to a waiter handed the lock, and the waiter's claim.

Every waiter blocks (``BLPOP``) on its own list (``:s:<owner>``) and on the lock's wake-up
list (``:s``), with its claim (the acquire script) queued behind on the same connection, so
the server runs the claim the moment the wait ends and the waiter wakes once, to both replies.

A script that hands the lock to a lone waiter (a release, say, with nobody else queued) pushes
the waiter's call to the wake-up list in the same atomic step: the waiter blocked longest there
is the only one waiting, and wakes with no round trip of the releasing client's. A script that
hands it to one waiter among several returns the call with its reply, and the client pushes it
to that owner's own list (``wake()``): the order in which waiters blocked may differ from the
order of the queue (one registered first, another blocked first), and the script may touch only
the keys it was given, which an owner's own list is not. A waiter given another owner's call on
the wake-up list (rare: a newcomer that blocked before the owner did) passes it on to that
owner's own list (``pass_on()``).

A wake-up call that is lost (the client died or lost its connection after the script ran)
costs time, never safety: the waiter's claim runs when its wait ends (``max_wait`` at most),
and a grant not claimed within a second has ended by then, to be handed on or taken afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import redis
import redis.asyncio

from ..base import AcquireRequest, AcquireResult, Grant
from .loops import PerLoop
from .protocol import acquire_args, acquired, send_together, wake_up_call
from .renew import Pipelined
from .scripts import WAKE

__all__ = ["ClaimOnWake"]

logger = logging.getLogger("django_redis_lock")

#: What logs a wake-up call that could not be pushed: ``failed(lock name, error)``.
_Failed = Callable[[str, Exception], None]


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
        self._push(name, _handed(reply), _not_woken)
        return reply[1]

    async def awake(self, name: str, reply: Any, client: redis.asyncio.Redis) -> Any:
        """Do what :meth:`wake` does, through the running event loop's ``client``."""
        if not _hands_over(reply):
            return reply
        await self._apush(name, _handed(reply), _not_woken, client)
        return reply[1]

    def wait_keys(self, name: str, owner: str) -> tuple[str, str]:
        """Return the lists ``owner`` waits on for lock ``name``: its own, the wake-up list."""
        return self.key(name, f"s:{owner}"), self.key(name, "s")

    def pass_on(self, name: str, owner: str, reply: Any) -> Grant | None:
        """Return the grant a wait's (BLPOP's) ``reply`` brought ``owner``, or None.

        A call for another owner is pushed on to that owner's own list.
        """
        call = None if isinstance(reply, Exception) else wake_up_call(reply)
        if call is None or call[0] == owner:
            return None if call is None else call[1]
        self._push(name, [(call[0], reply[1])], _not_passed_on)
        return None

    async def apass_on(
        self, name: str, owner: str, reply: Any, client: redis.asyncio.Redis
    ) -> Grant | None:
        """Do what :meth:`pass_on` does, through the running event loop's ``client``."""
        call = None if isinstance(reply, Exception) else wake_up_call(reply)
        if call is None or call[0] == owner:
            return None if call is None else call[1]
        await self._apush(name, [(call[0], reply[1])], _not_passed_on, client)
        return None

    def _push(self, name: str, calls: Iterable[tuple[str, bytes]], failed: _Failed) -> None:
        # Each call to its owner's own list, in one pipeline; a failure is logged (see below).
        pipe: Any = self.client.pipeline(transaction=False)
        for command in self._own_list_pushes(name, calls):
            pipe.execute_command(*command)
        try:
            pipe.execute()
        except (self.family.error, self.family.cluster_error) as exc:
            failed(name, exc)

    async def _apush(
        self,
        name: str,
        calls: Iterable[tuple[str, bytes]],
        failed: _Failed,
        client: redis.asyncio.Redis,
    ) -> None:
        # _push() through the running event loop's ``client``.
        pipe = client.pipeline(transaction=False)
        for command in self._own_list_pushes(name, calls):
            pipe.execute_command(*command)
        try:
            await pipe.execute()
        except (self.family.error, self.family.cluster_error) as exc:
            failed(name, exc)

    def _own_list_pushes(
        self, name: str, calls: Iterable[tuple[str, bytes]]
    ) -> Iterator[tuple[Any, ...]]:
        # Each (owner, call) pushed to the owner's own list, which ends with the grant: a call
        # is "<fencing token> <grant ms> <owner>" (see handoff() in the helpers).
        for owner, call in calls:
            key = self.key(name, f"s:{owner}")
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
            call, reply = self._wait_then_claim(name, owner, window, args, request.attempt)
        self.pass_on(name, owner, call)
        result = self._claimed(name, self.wake(name, reply))
        if result is None:
            keys = self.script_keys("acquire", name, request.attempt)
            return acquired(self._run("acquire", name, args, keys))
        return result

    def _wait_then_claim(
        self, name: str, owner: str, window: float, args: list[Any], attempt: str
    ) -> tuple[Any, Any]:
        # The wait's and the claim's replies (or error replies). Sent together and read back
        # directly: a redis-py Pipeline's bookkeeping would run after the wake-up, on the
        # handoff's clock.
        commands = self._wait_commands(name, owner, window, args, attempt)
        pool, error_reply = self.client.connection_pool, self.family.response_error
        call, reply = send_together(pool, commands, error_reply)
        return call, reply

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
        await self.apass_on(name, owner, replies[0], client)
        result = self._claimed(name, await self.awake(name, replies[1], client))
        if result is None:
            keys = self.script_keys("acquire", name, request.attempt)
            return acquired(await self._arun("acquire", name, args, keys))
        return result

    def _wait_commands(
        self, name: str, owner: str, window: float, args: list[Any], attempt: str
    ) -> list[tuple[Any, ...]]:
        # BLPOP on the owner's wake-up lists, then the claim.
        keys = self.script_keys("acquire", name, attempt)
        return [
            ("BLPOP", *self.wait_keys(name, owner), f"{window:.3f}"),
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


def _handed(reply: list[Any]) -> Iterator[tuple[str, bytes]]:
    # The (owner, call) pairs a script's reply hands the lock to (reply() in the helpers).
    for owner, call in zip(reply[2::2], reply[3::2], strict=True):
        yield (owner.decode() if isinstance(owner, bytes) else owner), call


def _hands_over(reply: Any) -> bool:
    # Whether a script's reply carries owners it handed the lock to (reply() in the helpers).
    return type(reply) is list and bool(reply) and reply[0] == WAKE


def _not_passed_on(name: str, exc: Exception) -> None:
    logger.warning(
        "A waiter for lock %r was given the wake-up call of another, handed the lock, and could "
        "not pass it on (%s): that owner claims the lock when its wait ends.",
        name,
        exc,
    )
