"""Global rate limits: :func:`rate_limit` builds a :class:`RateLimit`; :func:`arate_limit`, its
asyncio twin.

A rate limit admits at most ``N`` hits in any window of its period, across every process that
uses the same alias, on the backend's clock: ``rate_limit("partner-api", "10/s")``. A hit is
admitted or not in one atomic step; nothing is held, so there is nothing to release. Like a lock
handle, a rate limit is cheap, may be built at import time, and may be shared by threads.
See "Rate limits" in the docs.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import ParamSpec, TypeVar

from ._core.decorating import held_while_awaited, held_while_called
from ._core.holds import send
from ._core.observe import notify, observers
from ._core.rate_limiting import (
    AdmissionSteps,
    Admit,
    Sleep,
    admission_steps,
    parse_rates,
    validate_cost,
)
from ._core.steps import adrive, drive
from ._core.validation import validate_flag, validate_name, validate_timeout
from .backends.base import Admission, BaseLockBackend, Rate
from .conf import DEFAULT_ALIAS
from .exceptions import LockArgumentTypeError, RateLimitExceededError
from .handler import locks
from .signals import rate_limited

__all__ = ["AsyncRateLimit", "RateLimit", "arate_limit", "last_admission", "rate_limit"]

P = ParamSpec("P")
R = TypeVar("R")

#: The answer to the last hit of this thread or asyncio task, of any rate limit.
_last: contextvars.ContextVar[Admission | None] = contextvars.ContextVar(
    "django_redis_lock_last_admission", default=None
)


def last_admission() -> Admission | None:
    """Return the answer to the last hit this thread (or asyncio task) made, if any.

    For a body run under a task's ``@rate_limit``: ``last_admission().at`` is when its hit was
    admitted, on the backend's clock.
    """
    return _last.get()


class _RateLimitBase:
    """What both twins keep: the name, the rates, the alias and the defaults of a hit."""

    def __init__(
        self,
        name: str,
        rate: str | Sequence[str],
        *,
        using: str = DEFAULT_ALIAS,
        cost: int = 1,
        blocking: bool = True,
        timeout: float | None = None,
    ) -> None:
        self.name = validate_name(name)
        #: The rates every hit must fit, by period.
        self.rates: tuple[Rate, ...] = parse_rates(rate, name=self.name)
        self.cost = validate_cost(cost, self.rates, name=self.name)
        if not isinstance(using, str):
            raise LockArgumentTypeError(
                f"using must be a LOCKS alias (a str), not {type(using).__name__}: {using!r}.",
                lock_name=self.name,
            )
        self.using = using
        self.blocking = validate_flag(blocking, argument="blocking", lock_name=self.name)
        self.timeout = validate_timeout(timeout, lock_name=self.name)

    def __repr__(self) -> str:
        rates = ", ".join(str(rate) for rate in self.rates)
        return f"<{type(self).__name__} {self.name!r} {rates} using={self.using!r}>"

    @property
    def backend(self) -> BaseLockBackend:
        """Return the backend of ``using``, built on first use."""
        return locks[self.using]

    def _steps(
        self, blocking: bool | None, timeout: float | None, cost: int | None
    ) -> tuple[int, AdmissionSteps]:
        # One call's arguments, checked (the handle's own for None), and its waiting loop.
        name = self.name
        if blocking is None:
            blocking = self.blocking
        if timeout is None:
            timeout = self.timeout
        cost = self.cost if cost is None else validate_cost(cost, self.rates, name=name)
        blocking = validate_flag(blocking, argument="blocking", lock_name=name)
        timeout = validate_timeout(timeout, lock_name=name)
        return cost, admission_steps(cost, blocking, timeout, time.monotonic)

    def _answered(self, admission: Admission, cost: int) -> Admission:
        """Tell the observers and, for a refusal, the ``rate_limited`` receivers."""
        _last.set(admission)
        if observers:
            notify("rate_limited", self.using, self.name, admission.admitted)
        if not admission.admitted:
            arguments = {
                "sender": type(self),
                "rate_limit": self,
                "name": self.name,
                "using": self.using,
                "cost": cost,
                "retry_after": admission.retry_after,
            }
            send(rate_limited, self.name, arguments)
        return admission

    def exceeded(self, admission: Admission) -> RateLimitExceededError:
        """Return the error that tells of ``admission``, a refusal."""
        return RateLimitExceededError(
            f"Rate limit {self.name!r} ({admission.rate}) has no room: the next slot frees in "
            f"{admission.retry_after:.3f} s.",
            lock_name=self.name,
            retry_after=admission.retry_after,
        )


class RateLimit(_RateLimitBase):
    """A rate limit named ``name``: at most ``rate`` hits, on the backend ``using``.

    ``rate`` is ``"N/s"``, ``"N/m"``, ``"N/h"`` or ``"N/d"`` (``"N/15m"`` for a multiple of
    the unit), or a list of them that must all admit a hit (``["10/s", "50000/d"]``). ``cost``
    is the weight of a hit (default 1). A blocking hit (the default) waits for a slot, at most
    ``timeout`` seconds (None: as long as it takes); it sleeps until the moment the backend
    says a slot frees, never polling.

    As a context manager or a decorator, a hit that finds no room in time raises
    :class:`~django_redis_lock.RateLimitExceededError`, which says when a slot frees.
    """

    def acquire(
        self, blocking: bool | None = None, timeout: float | None = None, cost: int | None = None
    ) -> bool:
        """Admit one hit; return whether it was admitted (the handle's defaults for None)."""
        return self.admit(blocking, timeout, cost).admitted

    def admit(
        self, blocking: bool | None = None, timeout: float | None = None, cost: int | None = None
    ) -> Admission:
        """Do what :meth:`acquire` does, and return the backend's answer.

        A refused answer's ``retry_after`` says how many seconds until a slot frees.
        """
        cost, steps = self._steps(blocking, timeout, cost)
        backend = self.backend

        def run(step: Admit | Sleep) -> Admission | None:
            if isinstance(step, Admit):
                return backend.admit(self.name, self.rates, step.cost)
            time.sleep(step.seconds)
            return None

        return self._answered(drive(steps, run), cost)

    def __enter__(self) -> RateLimit:
        admission = self.admit()
        if not admission.admitted:
            raise self.exceeded(admission)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    def __call__(self, func: Callable[P, R]) -> Callable[P, R]:
        """Return ``func`` admitting one hit before each call (see the class)."""
        return held_while_called(self, func, builder="rate_limit", lock_name=self.name)


class AsyncRateLimit(_RateLimitBase):
    """The asyncio twin of :class:`RateLimit`: the same limits, the same keys, awaited."""

    async def acquire(
        self, blocking: bool | None = None, timeout: float | None = None, cost: int | None = None
    ) -> bool:
        """Do what :meth:`RateLimit.acquire` does, without blocking the event loop."""
        return (await self.admit(blocking, timeout, cost)).admitted

    async def admit(
        self, blocking: bool | None = None, timeout: float | None = None, cost: int | None = None
    ) -> Admission:
        """Do what :meth:`RateLimit.admit` does, without blocking the event loop."""
        cost, steps = self._steps(blocking, timeout, cost)
        backend = self.backend

        async def run(step: Admit | Sleep) -> Admission | None:
            if isinstance(step, Admit):
                return await backend.aadmit(self.name, self.rates, step.cost)
            await asyncio.sleep(step.seconds)
            return None

        return self._answered(await adrive(steps, run), cost)

    async def __aenter__(self) -> AsyncRateLimit:
        admission = await self.admit()
        if not admission.admitted:
            raise self.exceeded(admission)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None

    def __call__(self, func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        """Return the coroutine function ``func`` admitting one hit before each call."""
        return held_while_awaited(self, func, builder="rate_limit", lock_name=self.name)


#: :func:`rate_limit` reads well in ``with rate_limit("partner-api", "10/s"):``.
rate_limit = RateLimit
#: The asyncio twin: ``async with arate_limit("partner-api", "10/s"):``.
arate_limit = AsyncRateLimit
