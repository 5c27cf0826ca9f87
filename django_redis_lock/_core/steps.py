"""The acquire loop's steps: the backend calls it yields to the handle that drives it."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

from ..backends.base import AcquireRequest, AcquireResult

__all__ = ["Step", "Steps", "WaitThenClaim", "Withdraw"]


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
