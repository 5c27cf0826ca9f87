"""Asking N Redis masters at once, and the arithmetic of their majority answers.

:class:`Quorum` runs one call on every master from a small thread pool per master, so one
slow master costs at most its own timeouts, and turns the masters' answers into one: a value
a majority confirm, or an error naming how many answered. Redlock is built on it (see
"RedlockBackend" in docs/backends.rst).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any, TypeVar

from ..exceptions import BackendUnavailableError, LockError
from ._redis.connections import redact_url
from .base import LockInfo
from .redis import RedisBackend

__all__ = ["Failed", "Quorum", "answer"]

T = TypeVar("T")

#: Calls that may wait on one master at once; past that, it counts as not answering.
_THREADS_PER_MASTER = 8

#: How long a settled call waits for the masters that have not answered yet (seconds): a
#: healthy master whose thread waited for a core answers within it, so every master's grant
#: (and fencing token) is heard; a frozen master costs no more than this.
_GRACE = 0.025


def answer(left: float | LockError | None) -> float | Failed | None:
    """Return one master's renewal answer, an error it could not give as a failed master."""
    return Failed(left) if isinstance(left, LockError) else left


class Failed:
    """A master that did not answer: the error it raised."""

    __slots__ = ("error",)

    def __init__(self, error: LockError) -> None:
        self.error = error


class Quorum:
    """The masters ``nodes``, asked at once; a majority of them decides.

    ``bound`` is the longest a fan-out of one-round-trip calls waits for its answers: a
    master that has not answered by then counts as unavailable (its call ends on its own).
    ``clock_drift_factor`` is the share of a lease allowed for the masters' clock drift.
    """

    def __init__(
        self, nodes: list[RedisBackend], *, bound: float, clock_drift_factor: float
    ) -> None:
        self.nodes = nodes
        #: How many masters make a majority.
        self.quorum = len(nodes) // 2 + 1
        self.bound = bound
        self.clock_drift_factor = clock_drift_factor
        self._pools: list[ThreadPoolExecutor] | None = None
        self._outstanding: list[int] = []
        #: The latest call on each master of each order (see fan()), while it runs.
        self._latest: dict[tuple[int, Hashable], Future[Any]] = {}
        self._pool_pid = 0
        self._lock = threading.Lock()
        _quorums.add(self)

    def _executors(self) -> list[ThreadPoolExecutor]:
        # Called with self._lock held: a close() in another thread then never shuts down the
        # pools a call is being submitted to (it swaps them out under the same lock).
        pools = self._pools
        if pools is None or self._pool_pid != os.getpid():
            # A forked child has none of its parent's threads: it builds its own pools.
            pools = self._pools = [
                ThreadPoolExecutor(
                    max_workers=_THREADS_PER_MASTER,
                    thread_name_prefix=f"django-redis-lock-redlock-{index}",
                )
                for index in range(len(self.nodes))
            ]
            self._outstanding = [0] * len(self.nodes)
            self._latest = {}
            self._pool_pid = os.getpid()
        return pools

    def _submit(
        self, index: int, call: Callable[[RedisBackend], T], order: Hashable | None = None
    ) -> Future[T]:
        # Each master has threads of its own, so one that does not answer ties up only its
        # own; past a few calls outstanding it is not asked at all until it answers again.
        with self._lock:
            pools = self._executors()
            busy = self._outstanding[index] >= _THREADS_PER_MASTER
            if not busy:
                self._outstanding[index] += 1
                before = None if order is None else self._latest.get((index, order))
                run = call if before is None else _after(before, call)
                future = pools[index].submit(run, self.nodes[index])
                if order is not None:
                    self._latest[(index, order)] = future
        if busy:
            url = redact_url(self.nodes[index].url)
            refused: Future[T] = Future()
            refused.set_exception(
                BackendUnavailableError(f"Redis at {url} has not answered earlier calls yet.")
            )
            return refused
        future.add_done_callback(lambda done: self._answered_one(index, order, done))
        return future

    def _answered_one(self, index: int, order: Hashable | None, done: Future[Any]) -> None:
        with self._lock:
            # Never below 0: a call of pools that close() swapped out may end after new ones.
            self._outstanding[index] = max(0, self._outstanding[index] - 1)
            if order is not None and self._latest.get((index, order)) is done:
                del self._latest[(index, order)]

    def fan(
        self,
        call: Callable[[RedisBackend], T],
        *,
        nodes: Sequence[int] | None = None,
        bounded: bool = True,
        decided: Callable[[list[T | Failed]], bool] | None = None,
        order: Hashable | None = None,
    ) -> list[T | Failed]:
        """Run ``call`` on every master (or those at ``nodes``) at once; return the outcomes.

        A master that raised BackendUnavailableError, or (``bounded``) did not answer within
        the per-master timeouts, is a :class:`Failed`; any other error propagates. Given
        ``decided`` (true of the answers so far once they settle the outcome), the masters
        that have not answered by then are not waited for, and count as failed.

        Such a call runs on, and the next fan-out may reach that master before it does: on
        another of its threads and connections. Calls of one ``order`` (a lock's name) reach
        each master in the order they were made: one waits for the call before it there. So
        a release that ran late never frees its owner's next hold, and an acquire that ran
        late never comes after the reentry that counts on it.
        """
        chosen = range(len(self.nodes)) if nodes is None else nodes
        started = time.monotonic()
        futures = {self._submit(index, call, order): index for index in chosen}
        deadline = started + self.bound if bounded else None
        pending = set(futures)
        while pending:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, pending = wait_futures(pending, timeout=timeout, return_when=FIRST_COMPLETED)
            if not done:
                break  # the bound passed
            if (
                decided is not None
                and pending
                and decided([self._outcome(f) for f in futures if f.done()])
            ):
                # Settled. The others get a moment more, which healthy masters need on a
                # loaded machine: the call returns as soon as they have all answered.
                wait_futures(pending, timeout=_GRACE)
                break
        outcomes: list[T | Failed] = []
        for future, index in futures.items():
            if not future.done():
                url = redact_url(self.nodes[index].url)
                outcomes.append(
                    Failed(BackendUnavailableError(f"Redis at {url} did not answer in time."))
                )
                continue
            outcomes.append(self._outcome(future))
        return outcomes

    def ask(
        self, call: Callable[[RedisBackend], T], order: Hashable | None = None
    ) -> list[T | Failed]:
        """:meth:`fan` ``call`` out until a majority confirm (a number) or deny (None)."""
        return self.fan(call, decided=self.settled, order=order)

    def _outcome(self, future: Future[Any]) -> Any:
        """Return what a master answered, or a :class:`Failed` for one that failed."""
        error = future.exception()
        if error is None:
            return future.result()
        if isinstance(error, BackendUnavailableError):
            return Failed(error)
        raise error

    def settled(self, outcomes: Sequence[object]) -> bool:
        """Return whether the answers so far settle a majority answer: confirmed or denied."""
        confirmed = sum(isinstance(o, (int, float)) and not isinstance(o, bool) for o in outcomes)
        denied = sum(o is None for o in outcomes)
        return confirmed >= self.quorum or denied >= self.quorum

    def unavailable(
        self, outcomes: Sequence[object], name: str | None, summary: str | None = None
    ) -> BackendUnavailableError:
        failures = [o.error for o in outcomes if isinstance(o, Failed)]
        answered = len(outcomes) - len(failures)
        if summary is None:
            summary = (
                f"only {answered} of {len(self.nodes)} Redis masters answered (a majority of "
                f"{self.quorum} is needed)"
            )
        detail = "; ".join(str(error) for error in failures)
        return BackendUnavailableError(
            f"Redlock: {summary}" + (f": {detail}" if detail else "."), lock_name=name
        )

    def answered(self, outcomes: Sequence[T | Failed], name: str | None) -> list[T]:
        """Return the answers; raise BackendUnavailableError if fewer than a majority answered."""
        answers = [o for o in outcomes if not isinstance(o, Failed)]
        if len(answers) < self.quorum:
            raise self.unavailable(outcomes, name)
        return answers

    def majority(
        self, outcomes: Sequence[float | Failed | None], name: str | None
    ) -> float | None:
        """Return the majority-th largest confirmed value, or None if a majority deny.

        Raise BackendUnavailableError when the masters that answered cannot decide: too few
        confirm, but the unreachable ones could still make a majority.
        """
        confirmed = sorted((o for o in outcomes if isinstance(o, (int, float))), reverse=True)
        if len(confirmed) >= self.quorum:
            return confirmed[self.quorum - 1]
        unknown = sum(isinstance(o, Failed) for o in outcomes)
        if len(confirmed) + unknown >= self.quorum:
            denied = len(outcomes) - len(confirmed) - unknown
            raise self.unavailable(
                outcomes,
                name,
                f"cannot tell whether the lease is held: {len(confirmed)} of "
                f"{len(self.nodes)} Redis masters confirm it, {denied} deny it and {unknown} "
                f"did not answer (a majority of {self.quorum} must confirm or deny it)",
            )
        return None

    def holders(
        self, outcomes: Sequence[list[LockInfo] | Failed], name: str | None
    ) -> list[LockInfo]:
        """Return the holders a majority of the masters list, from each master's listing.

        A holder is listed when a majority list the same owner of the name. Shown: the
        majority's lease (the majority-th longest), the largest token, and the rest as the
        master with that lease recorded them.
        """
        seen: dict[tuple[str, str], list[LockInfo]] = {}
        for infos in self.answered(outcomes, name):
            for info in infos:
                seen.setdefault((info.name, info.owner), []).append(info)
        merged = []
        for key in sorted(seen):
            copies = seen[key]
            if len(copies) < self.quorum:
                continue
            copies.sort(key=lambda info: info.ttl, reverse=True)
            chosen = copies[self.quorum - 1]
            holds = sorted((info.holds for info in copies), reverse=True)[self.quorum - 1]
            merged.append(
                dataclasses.replace(
                    chosen,
                    ttl=self.lease_left(chosen.ttl) or 0.001,
                    holds=holds,
                    fencing_token=max(info.fencing_token for info in copies),
                )
            )
        return merged

    def drift(self, seconds: float) -> float:
        return seconds * self.clock_drift_factor + 0.002

    def lease_left(self, seconds: float | None, elapsed: float = 0.0) -> float | None:
        if seconds is None:
            return None
        return max(0.001, round(seconds - elapsed - self.drift(seconds), 3))

    def close(self) -> None:
        """Shut the thread pools down (they are built again if used again)."""
        with self._lock:
            pools, self._pools = self._pools, None
        if pools is not None and self._pool_pid == os.getpid():
            for pool in pools:
                pool.shutdown(wait=False)


def _after(before: Future[Any], call: Callable[[RedisBackend], T]) -> Callable[[RedisBackend], T]:
    """Return ``call``, to be run once the call ``before`` it on the same master has ended.

    That one was submitted first to the same pool, so it runs already, or before this: the
    wait never holds up what it waits for. It ends within its own socket timeout.
    """

    def run(node: RedisBackend) -> T:
        wait_futures([before])
        return call(node)

    return run


#: Every Quorum of this process, so that a forked child can renew their locks.
_quorums: weakref.WeakSet[Quorum] = weakref.WeakSet()


def _forget_in_child() -> None:
    # A thread of the parent (one of a master's) may have held the lock as it forked: in the
    # child, nobody would ever release it.
    for quorum in list(_quorums):
        quorum._lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
