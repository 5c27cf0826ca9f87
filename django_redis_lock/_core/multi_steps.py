"""The multi-lock's all-or-nothing plan: one generator of typed steps, two drivers.

:meth:`AllOrNothing._plan` decides how a multi-lock takes its names: all at once where the
backend can (:class:`AtOnce`), else one by one in sorted order under one deadline
(:class:`Take`), giving back every name taken (:class:`GiveBack`, last first) when one cannot
be taken, when an error or an interruption comes, or when a lease taken first ended while the
last names were waited for. :class:`~django_redis_lock.MultiLock` and its asyncio twin only
run each step, blocking or awaited (:func:`drive`, :func:`adrive`), and throw a step's error
back in where it was yielded, as the single-name handles drive ``_core/handle.py``.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from ..backends.base import AcquireAllResult, AcquireRequest, BaseLockBackend
from ..exceptions import LockError
from .handle import LockHandle
from .holds import Hold
from .observe import Watch, observers
from .owner import new_attempt

__all__ = [
    "Acquisition",
    "AllOrNothing",
    "AtOnce",
    "GiveBack",
    "MultiStep",
    "MultiSteps",
    "Reply",
    "Take",
]

logger = logging.getLogger("django_redis_lock")

H = TypeVar("H", bound=LockHandle)
S = TypeVar("S")
R = TypeVar("R")
T = TypeVar("T")


# The steps -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AtOnce:
    """A step: ``backend.acquire_all(names, owner, request, holds)``, every name in one go.

    Its reply is an ``AcquireAllResult``, or None where the backend cannot take them at once.
    """

    backend: BaseLockBackend
    owner: str
    request: AcquireRequest
    #: The holds the caller knew it had of each name when the attempt was sent.
    holds: tuple[int, ...]
    sent: float


@dataclass(frozen=True, slots=True)
class Take(Generic[H]):
    """A step: ``member._acquire(blocking, timeout, renew)``, one name's own acquire loop.

    Its reply is whether the name was taken.
    """

    member: H
    blocking: bool
    timeout: float | None
    renew: bool


@dataclass(frozen=True, slots=True)
class GiveBack(Generic[H]):
    """A step: ``member.release()``, of a name taken by an acquisition that is given up."""

    member: H


#: One step of the plan.
MultiStep = AtOnce | Take[H] | GiveBack[H]

#: What a step's driver sends back: an AtOnce's result, a Take's answer, None for a GiveBack.
Reply = AcquireAllResult | bool | None

#: The plan: it yields steps, is sent their replies or thrown their errors, and returns None
#: when every name is held, else the name that could not be taken (and none is kept).
MultiSteps = Generator[MultiStep[H], Reply, "str | None"]


# The plan --------------------------------------------------------------------------------------


class Acquisition:
    """One acquisition of a multi-lock: the holds it took, and whether its holder was told."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.holds: list[Hold] = []
        self.told = False

    def tell(self) -> bool:
        """Return whether the holder is to be told of a loss now: the first time only."""
        with self._lock:
            tell, self.told = not self.told, True
            return tell


class AllOrNothing(Generic[H]):
    """How a multi-lock takes its names: every one, or none. The subclass sets the fields."""

    names: tuple[str, ...]
    using: str
    _members: tuple[H, ...]
    # Each hold of a held acquisition, to that acquisition: a loss is told once per one.
    _bound: weakref.WeakKeyDictionary[Hold, Acquisition]
    _binding: threading.Lock

    def _plan(
        self, backend: BaseLockBackend, blocking: bool, timeout: float | None, renew: bool
    ) -> MultiSteps[H]:
        """Take every name; return None, or the name that could not be taken (none kept)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        once = self._at_once(backend)
        if once is not None:
            try:
                result = yield once
            except BaseException:
                self._withdraw_at_once(once)  # no answer (or cancelled): undone later
                raise
            assert not isinstance(result, bool)
            outcome = self._took_at_once(once, result, blocking, renew)
            if outcome is True:
                self._bind()
                return None
            if outcome is not None and not blocking:
                return outcome
        while True:
            taken: list[H] = []
            try:
                refused = yield from self._take_each(taken, blocking, deadline, renew)
                acquisition = None if refused is not None else self._bind()
            except GeneratorExit:
                raise
            except BaseException:
                yield from self._give_back(taken)
                raise
            if acquisition is None:
                yield from self._give_back(taken)
                return refused
            ended = self._ended()
            if ended is None:
                return None
            self._unbind(acquisition)
            yield from self._give_back(taken)  # and start again, if there is time left
            if not blocking or self._left(deadline) == 0:
                return ended

    def _take_each(
        self, taken: list[H], blocking: bool, deadline: float | None, renew: bool
    ) -> MultiSteps[H]:
        """Take the names one by one, into ``taken``; return the first refused, if any."""
        for member in self._members:
            left = self._left(deadline) if blocking else None
            if not (yield Take(member, blocking, left, renew)):
                return member.name
            taken.append(member)
        return None

    def _give_back(self, taken: list[H]) -> Generator[MultiStep[H], Reply, None]:
        """Release what an acquisition given up took, last first; its failures are logged.

        An interruption (a cancelled task, whose release is finished all the same) is
        raised once every name has been given back.
        """
        interrupted: BaseException | None = None
        for member in reversed(taken):
            try:
                yield GiveBack(member)
            except LockError as error:  # a lease already ended, or the backend is away
                self._rollback_failed(member.name, error)
            except GeneratorExit:
                raise
            except BaseException as error:
                interrupted = error
        if interrupted is not None:
            raise interrupted

    @staticmethod
    def _left(deadline: float | None) -> float | None:
        """Return the time left until ``deadline`` (None: no bound) for the next name."""
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _ended(self) -> str | None:
        """Return a name whose lease, taken by this acquisition, ended meanwhile (else None).

        Without renewal, the lease of a name taken first can end while the last ones are
        waited for: the names are not all held then, and the acquisition starts again.
        """
        now = time.monotonic()
        for member in self._members:
            hold = member._hold()
            ends = None if hold is None else hold.ends if hold.lease is None else hold.lease.ends
            if hold is None or ends is None or hold.lost_reason is not None or now >= ends:
                return member.name
        return None

    def _rollback_failed(self, name: str, error: Exception) -> None:
        logger.warning(
            "Could not release lock %r while giving up the locks of %r: %s (it is released "
            "when the backend answers again, or when its lease ends).",
            name,
            list(self.names),
            error,
        )

    # Every name in one step ----------------------------------------------------------------------

    def _at_once(self, backend: BaseLockBackend) -> AtOnce | None:
        """Return the all-or-nothing attempt the acquisition starts with, if any.

        Where the backend takes every name in one step (one script, on one Redis), an
        acquisition that meets no other owner costs one round trip and never holds some of
        its names without the others; else the names are taken one by one. None when the
        caller's hold of a name is lost: that name's own acquire reports it.
        """
        first = self._members[0]
        owner = first._owner_token()
        holds = self._holds()
        if self._any_lost(holds):
            return None
        request = AcquireRequest(
            ttl=first._lease_on(backend),
            metadata=first._holder_json(),
            fair=first.fair,
            attempt=new_attempt(),
        )
        counts = tuple(0 if hold is None else hold.count for hold in holds)
        return AtOnce(backend, owner, request, counts, time.monotonic())

    def _took_at_once(
        self, once: AtOnce, result: AcquireAllResult | None, blocking: bool, renew: bool
    ) -> Literal[True] | str | None:
        """Record what an attempt at once did; return what the acquisition does next.

        True: every name is held. A name: it is held by another owner, and nothing was taken.
        None: the names are to be acquired one by one (the backend cannot take them at once,
        or left a case to each name's own acquire: a lost lease reported there, say).
        """
        if result is None or not result.acquired:
            if observers and result is not None and result.refused and not blocking:
                self._watched([result.refused], blocking, acquired=False)
            return None if result is None else result.refused
        ends = [once.sent + (taken.lease or once.request.ttl) for taken in result.results]
        if self._any_lost(self._holds()) or time.monotonic() >= min(ends):
            # A lease ended before the answer came, or a name held before was found lost
            # meanwhile: no acquisition. Each name's own acquire settles it (and reports it).
            self._withdraw_at_once(once)
            return None
        for member, taken, end in zip(self._members, result.results, ends, strict=True):
            member._held(
                once.backend,
                once.owner,
                taken,
                attempt=once.request.attempt,
                ends=end,
                started=once.sent,
                renew=renew,
            )
        if observers:
            self._watched(self.names, blocking, acquired=True)
        return True

    def _holds(self) -> list[Hold | None]:
        """Return the caller's hold of each name (None where it holds none)."""
        return [member._hold() for member in self._members]

    @staticmethod
    def _any_lost(holds: list[Hold | None]) -> bool:
        """Return whether one of the caller's holds was found lost."""
        return any(hold is not None and hold.lost_reason is not None for hold in holds)

    def _withdraw_at_once(self, once: AtOnce) -> None:
        """Have whatever an attempt at once took, with no answer seen, undone on the backend."""
        for member in self._members:
            member._withdraw_later(once.backend, once.owner, once.request.attempt)

    def _watched(self, names: Iterable[str], blocking: bool, *, acquired: bool) -> None:
        first = self._members[0]
        for name in names:
            watch = Watch(self.using, name, blocking, first.timeout if blocking else None)
            watch.acquired = acquired
            watch.end()

    # Which acquisition took a hold -------------------------------------------------------------

    def _bind(self) -> Acquisition:
        """Tie the caller's holds of every name to one acquisition, and return it.

        A hold the caller had before (a reentrant acquire) stays tied to the acquisition
        that took it first.
        """
        acquisition = Acquisition()
        with self._binding:
            for member in self._members:
                hold = member._hold()
                if hold is not None and self._bound.setdefault(hold, acquisition) is acquisition:
                    acquisition.holds.append(hold)
        return acquisition

    def _unbind(self, acquisition: Acquisition) -> None:
        """Untie the holds of an acquisition being given back: their losses are no news."""
        with self._binding:
            for hold in acquisition.holds:
                self._bound.pop(hold, None)
