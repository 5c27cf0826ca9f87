"""The acquire loop's steps: the backend calls it yields to the handle that drives it.

A loop of typed steps (the single-name acquire, the multi-lock's plan) is run by a driver,
:func:`drive` or its asyncio twin :func:`adrive`: each step's reply is sent back in, each
step's error thrown back in where the step was yielded, so the loop alone decides.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import TypeVar

from ..backends.base import AcquireRequest, AcquireResult

__all__ = ["Step", "Steps", "WaitThenClaim", "Withdraw", "adrive", "drive"]

S = TypeVar("S")
R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class WaitThenClaim:
    """A step of the acquire loop: ``backend.wait_and_claim(name, owner, seconds, request)``."""

    seconds: float
    request: AcquireRequest


@dataclass(frozen=True, slots=True)
class Withdraw:
    """The last step of an interrupted acquire: ``backend.withdraw(name, owner, holds, attempt)``.

    It undoes what the acquire may have done; the driver sees it to its end, even if
    interrupted again.
    """

    holds: int
    attempt: str


#: One backend call of the acquire loop.
Step = AcquireRequest | WaitThenClaim | Withdraw

#: The acquire loop: it yields backend calls, is sent their replies (None for a Withdraw)
#: or thrown their errors, and returns whether the lock was acquired.
Steps = Generator[Step, "AcquireResult | None", bool]


def drive(steps: Generator[S, R, T], run: Callable[[S], R]) -> T:
    """Run ``steps`` to its end: send each step's reply back in, or throw its error."""
    try:
        step = next(steps)
        while True:
            try:
                reply = run(step)
            except BaseException as error:
                step = steps.throw(error)
            else:
                step = steps.send(reply)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def adrive(steps: Generator[S, R, T], run: Callable[[S], Awaitable[R]]) -> T:
    """Run ``steps`` to its end as :func:`drive` does, awaiting each step."""
    try:
        step = next(steps)
        while True:
            try:
                reply = await run(step)
            except BaseException as error:
                step = steps.throw(error)
            else:
                step = steps.send(reply)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
