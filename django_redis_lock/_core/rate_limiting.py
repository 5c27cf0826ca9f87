"""What every rate-limit handle decides: its rates read from text, and the waiting loop.

The loop is a generator of typed steps, as the acquire loop of a lock is (``steps.py``): it
yields :class:`Admit` (ask the backend) and :class:`Sleep` (wait that long), and a blocking or
an asyncio driver runs each step. A refused hit sleeps until the moment the backend says a slot
frees, plus a little jitter, so waiters that were told the same moment do not all ask at once;
it never polls.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass

from ..backends.base import Admission, Rate
from ..exceptions import InvalidLockArgumentError, LockArgumentTypeError
from .validation import MAX_SECONDS

__all__ = [
    "AdmissionSteps",
    "Admit",
    "Sleep",
    "admission_steps",
    "parse_rates",
    "validate_cost",
]

#: The seconds of each unit a rate may be written in.
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

#: The largest limit a rate may have. The weight in a window stays exact in Lua's numbers far
#: below 2^50, past which ``rate.lua`` counts its running totals from the window's base again.
MAX_LIMIT = 10**12

_RATE = re.compile(r"^\s*(-?[0-9]+)\s*/\s*([0-9]*)\s*([a-z]+)\s*$", re.ASCII)
#: Numbers longer than this are out of range whatever they are, and never converted: ``int()``
#: of thousands of digits is refused (or slow) by Python itself.
_DIGITS = 18
_FORMS = '"N/s", "N/m", "N/h" or "N/d" (or "N/<count><unit>", as "100/15m")'


def parse_rates(value: object, *, name: str | None = None) -> tuple[Rate, ...]:
    """Return the rates ``value`` gives (one rate's text, or a list of them), by period.

    Two rates of one period are one, the stricter: every rate must admit a hit.
    """
    texts: Iterable[object] = [value] if isinstance(value, str) else _listed(value, name)
    by_period: dict[float, Rate] = {}
    for text in texts:
        rate = _parse(text, name)
        known = by_period.get(rate.period)
        if known is None or rate.limit < known.limit:
            by_period[rate.period] = rate
    if not by_period:
        raise InvalidLockArgumentError("rate must name at least one rate, got [].", lock_name=name)
    return tuple(sorted(by_period.values(), key=lambda rate: rate.period))


def _listed(value: object, name: str | None) -> Iterable[object]:
    if isinstance(value, (list, tuple)):
        return value
    raise LockArgumentTypeError(
        f'rate must be a str such as "10/s", or a list of them, not {type(value).__name__}: '
        f"{value!r}.",
        lock_name=name,
    )


def _parse(text: object, name: str | None) -> Rate:
    if not isinstance(text, str):
        raise LockArgumentTypeError(
            f'a rate must be a str such as "10/s", not {type(text).__name__}: {text!r}.',
            lock_name=name,
        )
    match = _RATE.match(text)
    if match is None:
        raise InvalidLockArgumentError(
            f"rate {text!r} is not of the form {_FORMS}.", lock_name=name
        )
    limit, count, unit = _number(match[1]), _number(match[2] or "1"), match[3]
    if unit not in UNITS:
        raise InvalidLockArgumentError(
            f"rate {text!r} has the unknown unit {unit!r}: use s, m, h or d.", lock_name=name
        )
    if limit is None or not 1 <= limit <= MAX_LIMIT:
        raise InvalidLockArgumentError(
            f"rate {text!r} must admit from 1 to {MAX_LIMIT} hits.", lock_name=name
        )
    period = None if count is None else count * UNITS[unit]
    if period is None or not 1 <= period <= MAX_SECONDS:
        raise InvalidLockArgumentError(
            f"rate {text!r} must have a period from 1 second to ten years.", lock_name=name
        )
    return Rate(limit, float(period))


def _number(written: str) -> int | None:
    return int(written) if len(written.lstrip("-")) <= _DIGITS else None


def validate_cost(value: object, rates: tuple[Rate, ...], *, name: str | None = None) -> int:
    """Return ``value`` if it is a hit's weight each of ``rates`` can ever admit."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise LockArgumentTypeError(
            f"cost must be an int, not {type(value).__name__}: {value!r}.", lock_name=name
        )
    strictest = min(rates, key=lambda rate: rate.limit)
    if not 1 <= value <= strictest.limit:
        raise InvalidLockArgumentError(
            f"cost must be from 1 to the smallest limit, {strictest.limit} (of rate "
            f"{str(strictest)!r}), got {value!r}: a larger hit could never be admitted.",
            lock_name=name,
        )
    return value


@dataclass(frozen=True, slots=True)
class Admit:
    """A step of the waiting loop: ``backend.admit(name, rates, cost)``."""

    cost: int


@dataclass(frozen=True, slots=True)
class Sleep:
    """A step of the waiting loop: sleep ``seconds``."""

    seconds: float


#: The most jitter added to a sleep, in seconds, and as a share of it.
JITTER, JITTER_SHARE = 0.01, 0.02


#: The waiting loop: it yields steps, is sent the backend's answers (None for a Sleep), and
#: returns the last answer.
AdmissionSteps = Generator["Admit | Sleep", "Admission | None", Admission]


def admission_steps(
    cost: int, blocking: bool, timeout: float | None, clock: Callable[[], float]
) -> AdmissionSteps:
    """Ask for a slot until one is admitted, or it is clear none will be in ``timeout``.

    Return the last answer: admitted, or refused with the seconds until a slot frees. A
    waiter whose slot would free only after its timeout is refused at once.
    """
    deadline = None if timeout is None else clock() + timeout
    while True:
        admission = yield Admit(cost)
        assert admission is not None
        if admission.admitted or not blocking:
            return admission
        left = None if deadline is None else deadline - clock()
        if left is not None and admission.retry_after > left:
            return admission
        pause = admission.retry_after + random.uniform(  # noqa: S311 (not a secret)
            0, JITTER + JITTER_SHARE * admission.retry_after
        )
        yield Sleep(pause if left is None else min(pause, left))
