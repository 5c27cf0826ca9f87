"""Several locks of one Redis server in one round trip: the renewal of every lease a process
holds there, and the release of a multi-lock's names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio

from ...exceptions import LockError
from .._requests import ReleaseRequest
from .keys import RedisKeyspace
from .loops import PerLoop
from .protocol import count, extend_args, release_args, seconds
from .scripts import Scripts

__all__ = ["Pipelined"]


class Pipelined(RedisKeyspace):
    """Renew leases (the extend script), or release names, all of one server's in one pipeline."""

    _scripts: Scripts
    _fencing_arg: bytes

    _async_clients: PerLoop[redis.asyncio.Redis]

    def wake(self, name: str, reply: Any) -> Any:
        raise NotImplementedError("subclasses of Pipelined must provide a wake() method")

    async def awake(self, name: str, reply: Any, client: redis.asyncio.Redis) -> Any:
        raise NotImplementedError("subclasses of Pipelined must provide an awake() method")

    def release_many(
        self, releases: Sequence[tuple[str, str, ReleaseRequest]]
    ) -> list[int | LockError | None]:
        # One pipeline of release scripts: one round trip, whatever the number of names. Each
        # reply wakes the owners it handed its lock to (wake()); an error stands in its place.
        try:
            replies = self._scripts.run_many(self.client, "release", self._releases(releases))
        except self.family.error as exc:
            return [self._unavailable(exc, name) for name, _, _ in releases]
        error = self.family.error
        return [
            self._unavailable(reply, name)
            if isinstance(reply, error)
            else count(self.wake(name, reply))
            for (name, _, _), reply in zip(releases, replies, strict=True)
        ]

    async def arelease_many(
        self, releases: Sequence[tuple[str, str, ReleaseRequest]]
    ) -> list[int | LockError | None]:
        # release_many() on the running event loop's own client.
        client = await self._async_clients.get()
        try:
            replies = await self._scripts.arun_many(client, "release", self._releases(releases))
        except self.family.error as exc:
            return [self._unavailable(exc, name) for name, _, _ in releases]
        answers: list[int | LockError | None] = []
        for (name, _, _), reply in zip(releases, replies, strict=True):
            if isinstance(reply, self.family.error):
                answers.append(self._unavailable(reply, name))
            else:
                answers.append(count(await self.awake(name, reply, client)))
        return answers

    def _releases(
        self, releases: Sequence[tuple[str, str, ReleaseRequest]]
    ) -> list[tuple[list[str], list[Any]]]:
        # The release script's keys and arguments for each release.
        return [
            (self.script_keys("release", name), release_args(owner, request, self._fencing_arg))
            for name, owner, request in releases
        ]

    def renew(
        self, leases: Sequence[tuple[str, str, float]]
    ) -> Sequence[float | LockError | None]:
        # Every lease in one pipeline: one round trip, however many locks are held.
        if not leases:
            return []
        with self._errors(None):
            self._scripts.load(self.client, "extend")
            return [seconds(reply) for reply in self._renew_on(self.client, leases)]

    def _renew_on(
        self,
        client: Any,
        leases: Sequence[tuple[str, str, float]],
        keep: tuple[type[Exception], ...] = (),
    ) -> list[Any]:
        """Renew ``leases`` in one pipeline on ``client``; raise the first error of any.

        Errors of the ``keep`` types stand in the list instead, in the place of their lease.
        """
        calls = [(self.key(name), extend_args(owner, ttl, True)) for name, owner, ttl in leases]
        replies = self._scripts.run_many(client, "extend", calls)
        for reply in replies:
            if isinstance(reply, self.family.error) and not isinstance(reply, keep):
                raise reply
        return replies
