"""Withdrawing a failed Redlock try on each master, in the background, until it answers.

A try that a master did not answer may still wait in that master's socket (it was frozen, or
cut off) and run when it resumes, taking a hold nobody knows of; on enough masters such holds
make a majority for an owner that was told its acquire failed. So each master has a *lane*:
one thread that sends the withdrawals owed to that master, one after another, and sends them
again until the master answers, so a master that does not answer delays no other.

The order in which the master then runs a try and its withdrawal does not matter, by the rule
``lua/withdraw.lua`` keeps for every backend: a withdrawal that runs first leaves a mark that
makes the try take nothing when it runs, one that runs after drops what the try took.

A withdrawal is given up only when its try can no longer hold anything: when the master's
port refuses connections (its process is gone, with whatever it had not run yet), once the
try's lease has ended even if that process ran it just before.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence

from .._core.causes import caused_by
from ..exceptions import BackendUnavailableError
from ._quorum import Failed, Quorum
from .base import AcquireResult
from .redis import RedisBackend

__all__ = ["Try", "Withdrawals"]

logger = logging.getLogger("django_redis_lock")

#: The most withdrawals one master may owe; past it the oldest is given up (and logged).
MAX_OWED = 65536

#: How long a lane waits after a quick failure before trying again, at most (seconds). A
#: master that does not answer costs its own socket timeout per try instead.
MAX_PAUSE = 1.0


def refused(error: BaseException) -> bool:
    """Return whether ``error`` comes from a refused connection: the call was never sent."""
    return caused_by(error, ConnectionRefusedError)


@dataclasses.dataclass(frozen=True)
class Try:
    """One try of ``owner`` on the masters: ``attempt``, its id, and the ``ttl`` it asked for.

    Withdrawing it brings the owner's holds back to ``holds``, if the try took any.
    """

    name: str
    owner: str
    holds: int
    attempt: str
    ttl: float


@dataclasses.dataclass
class _Owed:
    try_: Try
    #: When the try has surely ended, once known (time.monotonic() seconds).
    ends: float = float("inf")


class _Lane:
    def __init__(self, node: RedisBackend) -> None:
        self.node = node
        self.owed: OrderedDict[tuple[str, str, str], _Owed] = OrderedDict()
        self.thread: threading.Thread | None = None


class Withdrawals:
    """The withdrawals owed to each master of ``masters``, each sent until it answers."""

    def __init__(self, masters: Quorum) -> None:
        self.masters = masters
        self._lock = threading.Lock()
        self._lanes: list[_Lane] = []
        self._pid = 0
        _all.add(self)

    def failed(self, try_: Try, outcomes: Sequence[AcquireResult | Failed]) -> None:
        """Withdraw ``try_``, which failed, on each master that took it or did not answer.

        The masters that took it answer now; those that did not answer (unless the connection
        was refused: the try never left) are owed it in the background, so a frozen master
        delays neither this call nor the others.
        """
        granted = [
            i for i, o in enumerate(outcomes) if isinstance(o, AcquireResult) and o.acquired
        ]
        if granted:
            answers = self.masters.fan(
                lambda node: node.withdraw(try_.name, try_.owner, try_.holds, try_.attempt),
                nodes=granted,
            )
            outcomes = list(outcomes)
            for index, answer in zip(granted, answers, strict=True):
                outcomes[index] = answer if isinstance(answer, Failed) else AcquireResult(False)
        self.unanswered(try_, outcomes)

    def unanswered(self, try_: Try, outcomes: Sequence[object]) -> None:
        """Owe the withdrawal of ``try_`` to each master whose outcome is a failure to answer."""
        for index, outcome in enumerate(outcomes):
            if isinstance(outcome, Failed) and not refused(outcome.error):
                self.owe(index, try_)

    def owe(self, index: int, try_: Try) -> None:
        """Withdraw ``try_`` on master ``index`` as soon as it answers."""
        with self._lock:
            if self._pid != os.getpid():
                # A forked child owes nothing: the withdrawals are its parent's to send.
                self._lanes = [_Lane(node) for node in self.masters.nodes]
                self._pid = os.getpid()
            lane = self._lanes[index]
            lane.owed.setdefault((try_.name, try_.owner, try_.attempt), _Owed(try_))
            while len(lane.owed) > MAX_OWED:
                (lost, _, _), _ = lane.owed.popitem(last=False)
                logger.warning(
                    "Gave up withdrawing a failed try on lock %r at %s: more than %d are owed.",
                    lost,
                    lane.node.location,
                    MAX_OWED,
                )
            if lane.thread is None:
                lane.thread = threading.Thread(
                    target=self._send,
                    args=(lane,),
                    name=f"django-redis-lock-redlock-withdraw-{index}",
                    daemon=True,
                )
                lane.thread.start()

    def _send(self, lane: _Lane) -> None:
        failures = 0
        while True:
            with self._lock:
                now = time.monotonic()
                for key in [key for key, owed in lane.owed.items() if owed.ends <= now]:
                    del lane.owed[key]
                if not lane.owed:
                    lane.thread = None  # the next owe() starts another
                    return
                key, owed = next(iter(lane.owed.items()))
                try_ = owed.try_
            sent = time.monotonic()
            try:
                lane.node.withdraw(try_.name, try_.owner, try_.holds, try_.attempt)
            except BackendUnavailableError as error:
                self._failed(lane, error)
                if caused_by(error, (TimeoutError, lane.node.family.timeout_error)):
                    # It waited a socket timeout already; sent again at once, a withdrawal is
                    # already on its way when a frozen master resumes.
                    failures = 0
                    continue
                # A quick refusal: a little later, then less and less often.
                failures += 1
                pause = min(MAX_PAUSE, 0.01 * 2**failures) - (time.monotonic() - sent)
                if pause > 0:
                    time.sleep(pause)
                continue
            except Exception:  # the lane must outlive any one failure
                logger.exception("Could not withdraw a failed try on lock %r.", try_.name)
            failures = 0
            with self._lock:
                if lane.owed.get(key) is owed:
                    del lane.owed[key]

    def _failed(self, lane: _Lane, error: BackendUnavailableError) -> None:
        if not refused(error):
            return  # the master may run the tries yet: they stay owed
        # Nothing listens where the master was: what its process had not run died with it,
        # and what it ran ends with its lease, on the server's clock, by then.
        now = time.monotonic()
        with self._lock:
            for owed in lane.owed.values():
                ttl = owed.try_.ttl
                owed.ends = min(owed.ends, now + ttl + self.masters.drift(ttl))


#: Every Withdrawals of this process, so that a forked child can renew their locks.
_all: weakref.WeakSet[Withdrawals] = weakref.WeakSet()


def _forget_in_child() -> None:
    # A lane of the parent may have held the lock as it forked: in the child, nobody would
    # ever release it. The lanes are the parent's too (owe() builds the child's own).
    for withdrawals in list(_all):
        withdrawals._lock = threading.Lock()
        withdrawals._lanes, withdrawals._pid = [], 0


os.register_at_fork(after_in_child=_forget_in_child)
